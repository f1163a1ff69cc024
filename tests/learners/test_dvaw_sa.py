"""Strongly-adaptive discounted-VAW ensemble: docs/algorithms/dvaw.md."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learners.dvaw_ensemble import expert_grid, share_rate
from learners.dvaw_sa import DVAWStronglyAdaptive, covering_size
from tests.learners._resume import assert_resumes_bit_identically


def stream(T: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    u = rng.standard_normal(d)
    y = X @ u + 0.3 * rng.standard_normal(T)
    y[T // 2 :] = X[T // 2 :] @ (-u) + 0.3 * rng.standard_normal(T - T // 2)
    return X, y


def brute_force(
    X: np.ndarray, y: np.ndarray, *, lam: float, horizon: int, hint: str, ref: str, augment: bool
) -> np.ndarray:
    """Every (gamma, interval) expert instantiated explicitly, linear-domain fixed share."""
    T, d = X.shape
    eta = expert_grid(d, horizon)
    gammas = [0.0] + [e / (1 + e) for e in eta]
    intervals = [
        (i << k, min(((i + 1) << k) - 1, horizon))
        for k in range(horizon.bit_length())
        for i in range(1, (horizon >> k) + 1)
    ]
    experts: list[tuple[float, tuple[int, int]]] = [(g, iv) for iv in intervals for g in gammas]
    n_int = len(experts)
    share = 0.5 if augment else 1.0
    p1 = [share / n_int] * n_int
    if augment:
        experts += [(g, (1, 10**9)) for g in gammas[1:]]
        p1 += [0.5 / len(eta)] * len(eta)
    p1a = np.array(p1)
    p = p1a.copy()
    P = [np.eye(d) / lam for _ in experts]
    v = [np.zeros(d) for _ in experts]
    L = M = y_prev = 0.0
    out = np.empty(T)
    for t in range(1, T + 1):
        x, yt = X[t - 1], y[t - 1]
        y_ref = y_prev if ref == "last" else 0.0
        lo, hi = y_ref - M, y_ref + M
        preds = np.empty(len(experts))
        cache = []
        for i, (g, (a, b)) in enumerate(experts):
            if g == 0.0 or not a <= t <= b:
                preds[i] = y_ref
                cache.append(None)
                continue
            if t == a:
                P[i], v[i] = np.eye(d) / lam, np.zeros(d)
            gx = P[i] @ x
            q = x @ gx
            c = g + q
            mu = v[i] @ x
            h = min(max(mu, lo), hi) if hint == "self" else y_ref
            preds[i] = min(max(mu + q / c * (h - mu), lo), hi)
            cache.append((gx, c, mu))
        out[t - 1] = p @ preds
        ell = 0.5 * (yt - preds) ** 2
        L = max(L, ell.max())
        if L > 0:
            p = p * np.exp(-ell / (2 * L))
            p /= p.sum()
        beta = share_rate(t)
        p = (1 - beta) * p + beta * p1a
        M = max(M, abs(yt - y_ref))
        y_prev = yt
        for i, (g, _) in enumerate(experts):
            if cache[i] is not None:
                gx, c, mu = cache[i]
                v[i] = v[i] + gx / c * (yt - mu)
                P[i] = (P[i] - np.outer(gx, gx) / c) / g
    return out


@pytest.mark.parametrize(
    ("augment", "hint", "ref"),
    [(False, "self", "last"), (True, "self", "zero"), (False, "external", "last")],
)
def test_lazy_bookkeeping_matches_brute_force(augment: bool, hint: str, ref: str) -> None:
    # §8 item 17: T = 64, d = 2, predictions to 1e-10
    T, d = 64, 2
    X, y = stream(T, d, seed=3)
    kw = {"lam": 1.0, "horizon": T, "hint": hint, "ref": ref}
    ref_preds = brute_force(X, y, augment=augment, **kw)
    model = DVAWStronglyAdaptive(d, augment=augment, stabilised=False, **kw)
    got = np.array([model.learn(x, float(v)).prediction for x, v in zip(X, y, strict=True)])
    assert np.all(np.abs(got - ref_preds) <= 1e-10 * (1 + np.abs(ref_preds)))


@pytest.mark.parametrize("augment", [False, True])
def test_mass_and_active_count(augment: bool) -> None:
    T, d = 300, 3
    X, y = stream(T, d, seed=1)
    model = DVAWStronglyAdaptive(d, horizon=512, augment=augment)
    n_gamma = len(expert_grid(d, 512)) + 1
    for t, (x, v) in enumerate(zip(X, y, strict=True), start=1):
        active = np.isfinite(model.logw_[: model._levels * model._G]).sum()
        assert active == (n_gamma - 1) * (int(math.log2(t)) + 1)
        rep = model.learn(x, float(v))
        assert abs(rep.diagnostics["total_mass"] - 1.0) <= 1e-9


def test_covering_size() -> None:
    for T in (1, 2, 3, 7, 64, 100, 1000):
        brute = sum(1 for k in range(T.bit_length()) for _ in range(1, (T >> k) + 1))
        assert covering_size(T) == brute
        assert covering_size(T) <= 2 * T


def test_beyond_horizon_keeps_working() -> None:
    X, y = stream(200, 2, seed=0)
    model = DVAWStronglyAdaptive(2, horizon=50)
    for x, v in zip(X, y, strict=True):
        rep = model.learn(x, float(v))
        assert math.isfinite(rep.prediction)
        assert abs(rep.diagnostics["total_mass"] - 1.0) <= 1e-9
    assert rep.diagnostics["active_experts"] == 0  # only full-history experts remain


def test_checkpoint_roundtrip_bit_identical() -> None:
    # §8 item 18
    X, y = stream(300, 3, seed=5)
    assert_resumes_bit_identically(DVAWStronglyAdaptive(3, horizon=400), X, y, 137)


def test_sa_plus_beats_faithful_sa_after_regime_change() -> None:
    # §5.5: the faithful SA ensemble keeps most mass on reference predictors
    rng = np.random.default_rng(0)
    T, d = 2048, 5
    X = rng.standard_normal((T, d))
    us = rng.standard_normal((T // 256 + 1, d))
    U = np.where(np.arange(T)[:, None] < T // 2, us[0], us[np.arange(T) // 256])
    y = np.einsum("td,td->t", X, U) + 0.1 * rng.standard_normal(T)
    loss = {}
    for augment in (False, True):
        m = DVAWStronglyAdaptive(d, horizon=T, augment=augment)
        loss[augment] = sum(m.learn(x, float(v)).loss for x, v in zip(X, y, strict=True))
    assert loss[True] < 0.5 * loss[False]
