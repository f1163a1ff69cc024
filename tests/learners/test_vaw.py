"""Classic VAW (``docs/algorithms/dvaw.md``)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from learners.dvaw import DiscountedVAW
from learners.vaw import VAW


def direct_vaw(X: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """Eq. (1) by np.linalg.solve: w_t = (lam I + sum_{s<=t} x x^T)^{-1} sum_{s<t} y_s x_s."""
    T, d = X.shape
    out = np.empty(T)
    A = lam * np.eye(d)
    b = np.zeros(d)
    for t in range(T):
        A = A + np.outer(X[t], X[t])
        out[t] = X[t] @ np.linalg.solve(A, b)
        b = b + y[t] * X[t]
    return out


def run(model, X, y):  # type: ignore[no-untyped-def]
    return np.array([model.learn(x, float(v)).prediction for x, v in zip(X, y, strict=True)])


@pytest.mark.parametrize(("d", "lam"), list(itertools.product((1, 3, 8), (0.5, 1.0, 3.0))))
def test_vaw_matches_eq1_and_dvaw_gamma_one(d: int, lam: float) -> None:
    # §8 item 1: gamma = 1 with hint 0 reduces to VAW; relative tolerance 1e-8
    rng = np.random.default_rng(d * 10 + int(lam * 2))
    X = rng.standard_normal((300, d))
    y = rng.standard_normal(300)
    ref = direct_vaw(X, y, lam)
    np.testing.assert_allclose(run(VAW(d, lam=lam), X, y), ref, rtol=1e-8, atol=1e-12)
    for stabilised in (False, True):
        dvaw = DiscountedVAW(d, gamma=1.0, lam=lam, hint="zero", stabilised=stabilised)
        np.testing.assert_allclose(run(dvaw, X, y), ref, rtol=1e-8, atol=1e-12)


def test_shrinkage_identity() -> None:
    # §2: y_hat^VAW = mu_t / (1 + x^T A_{t-1}^{-1} x), mu_t the online ridge prediction
    rng = np.random.default_rng(0)
    d, lam = 4, 1.0
    X, y = rng.standard_normal((100, d)), rng.standard_normal(100)
    model = VAW(d, lam=lam)
    A, b = lam * np.eye(d), np.zeros(d)
    for x, v in zip(X, y, strict=True):
        mu = x @ np.linalg.solve(A, b)
        lev = x @ np.linalg.solve(A, x)
        assert model.learn(x, float(v)).prediction == pytest.approx(mu / (1 + lev), rel=1e-9)
        A, b = A + np.outer(x, x), b + v * x


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("d", [1, 3, 8])
def test_static_regret_bound_thm21(seed: int, d: int) -> None:
    # §8 item 9: R_T(u) <= lam/2 |u|^2 + d/2 max y^2 ln(1 + sum |x|^2 / (lam d)), exact
    rng = np.random.default_rng(seed)
    lam, T = [0.5, 1.0, 3.0][seed % 3], 300
    X = rng.standard_normal((T, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(T)
    preds = run(VAW(d, lam=lam), X, y)
    u_star = np.linalg.lstsq(X, y, rcond=None)[0]
    bound_log = d / 2 * np.max(y**2) * math.log(1 + np.sum(X**2) / (lam * d))
    for u in (u_star, rng.standard_normal(d), 3 * rng.standard_normal(d)):
        regret = 0.5 * np.sum((y - preds) ** 2) - 0.5 * np.sum((y - X @ u) ** 2)
        assert regret <= lam / 2 * u @ u + bound_log + 1e-9 * (1 + abs(regret))


def test_vaw_fails_under_drift() -> None:
    # §2: d = 1, x = 1, y = -1 then +1: linear dynamic regret (the running mean lags)
    T = 2000
    y = np.where(np.arange(T) < T // 2, -1.0, 1.0)
    preds = run(VAW(1), np.ones((T, 1)), y)
    dyn_regret = 0.5 * np.sum((y - preds) ** 2)  # comparator u_t = y_t has zero loss
    assert dyn_regret > 0.1 * T


def test_soft_log_growth_of_static_regret() -> None:
    # §8 item 9 (soft): regret vs u* at T = 1k .. 16k fits a + c ln T, c <= d/2 max y^2
    rng = np.random.default_rng(0)
    d, T = 10, 16_000
    X = rng.standard_normal((T, d))
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    y = X @ u + 0.1 * rng.standard_normal(T)
    preds = run(VAW(d), X, y)
    Ts = [1000 * 2**k for k in range(5)]
    regrets = []
    for n in Ts:
        u_star = np.linalg.lstsq(X[:n], y[:n], rcond=None)[0]
        regrets.append(0.5 * np.sum((y[:n] - preds[:n]) ** 2 - (y[:n] - X[:n] @ u_star) ** 2))
    c, a = np.polyfit(np.log(Ts), regrets, 1)
    assert 0 < c <= d / 2 * np.max(y**2)
    assert max(regrets) < 100  # logarithmic, not linear, in T
