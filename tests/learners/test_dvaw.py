"""Discounted VAW with a fixed discount (``docs/algorithms/dvaw.md``); classic VAW is in
test_vaw.py."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from learners.dvaw import DiscountedVAW, begin, clip, hinted
from learners.rls import RLS
from tests.learners._resume import assert_resumes_bit_identically

GRID = list(itertools.product((1, 3, 8), (0.5, 1.0, 3.0), (0.5, 0.9, 0.99, 1.0)))


def gaussian(d: int, T: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§8 defaults: x ~ N(0, I), y ~ N(0, 1), hints ~ N(0, 1) with hint_1 = 0."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    y = rng.standard_normal(T)
    h = rng.standard_normal(T)
    h[0] = 0.0
    return X, y, h


class Trace:
    """One run of dvaw (external hints) with the direct quantities of §3.2 beside it."""

    def __init__(
        self,
        X: np.ndarray,
        y: np.ndarray,
        h: np.ndarray,
        gamma: float,
        lam: float,
        stabilised: bool = False,
    ) -> None:
        T, d = X.shape
        model = DiscountedVAW(d, gamma=gamma, lam=lam, hint="external", stabilised=stabilised)
        Sigma, theta, kappa = lam * np.eye(d), np.zeros(d), 0.0
        self.pred, self.rho, self.q = np.empty(T), np.empty(T), np.empty(T)
        self.w_impl, self.w_direct = np.empty((T, d)), np.empty((T, d))
        self.Sigma, self.theta, self.kappa = [Sigma], [theta], [kappa]  # index t-1 -> round t-1
        self.logdet, self.models = [model.logdet_[0]], []
        for t in range(T):
            x = X[t]
            b = begin(model.P_, model.v_, x, model._gamma)
            self.w_impl[t] = model.v_[0] + b.g[0] / b.c[0] * (h[t] - b.mu[0])  # §3.5
            self.q[t] = x @ np.linalg.solve(Sigma, x)
            Sigma = gamma * Sigma + np.outer(x, x)  # §3.2 closed form, Sigma_t
            self.w_direct[t] = np.linalg.solve(Sigma, h[t] * x + gamma * theta)
            self.rho[t] = x @ np.linalg.solve(Sigma, x)
            self.pred[t] = model.learn(x, float(y[t]), hint=float(h[t])).prediction
            theta = gamma * theta + y[t] * x
            kappa = gamma * kappa + y[t] ** 2
            self.Sigma.append(Sigma)
            self.theta.append(theta)
            self.kappa.append(kappa)
            self.logdet.append(model.logdet_[0])
        self.model = model

    def F(self, t: int, w: np.ndarray) -> float:
        """F^gamma_t(w) = 1/2 w^T Sigma_t w - theta_{t+1}^T w + kappa_t / 2 (§3.4)."""
        return 0.5 * w @ self.Sigma[t] @ w - self.theta[t] @ w + 0.5 * self.kappa[t]


@pytest.mark.parametrize(("d", "lam", "gamma"), GRID)
def test_closed_form_matches_direct_solve(d: int, lam: float, gamma: float) -> None:
    # §8 item 2: w_t and y_hat_t of §3.5 vs the §3.2 direct solve, arbitrary hints
    X, y, h = gaussian(d, 300, seed=d + int(10 * lam) + int(100 * gamma))
    tr = Trace(X, y, h, gamma, lam)
    scale = np.abs(tr.w_direct).max(axis=1, keepdims=True) + 1.0
    assert np.all(np.abs(tr.w_impl - tr.w_direct) <= 1e-8 * scale)
    pred_direct = np.einsum("td,td->t", X, tr.w_direct)
    np.testing.assert_allclose(tr.pred, pred_direct, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize(("d", "gamma"), list(itertools.product((1, 3, 8), (0.9, 0.99, 1.0))))
@pytest.mark.parametrize("stabilised", [False, True])
def test_inverse_invariants(d: int, gamma: float, stabilised: bool) -> None:
    # §8 item 3, T = 2000 on well-conditioned data
    rng = np.random.default_rng(d)
    T, lam = 2000, 1.0
    X, y = rng.standard_normal((T, d)), rng.standard_normal(T)
    # floor 0: the refresh alone keeps exact paper semantics (the floor is tested below)
    model = DiscountedVAW(d, gamma=gamma, lam=lam, stabilised=stabilised, lambda_floor=0.0)
    Sigma, theta = lam * np.eye(d), np.zeros(d)
    for t in range(T):
        x = X[t]
        q = x @ np.linalg.solve(Sigma, x)
        Sigma = gamma * Sigma + np.outer(x, x)
        theta_prev = theta
        theta = gamma * theta + y[t] * x
        rep = model.learn(x, float(y[t]))
        rho = rep.diagnostics["leverage"]
        assert 0.0 <= rho < 1.0
        assert rho == pytest.approx(x @ np.linalg.solve(Sigma, x), rel=1e-8, abs=1e-12)
        assert rho == pytest.approx(q / (gamma + q), rel=1e-8, abs=1e-12)
        assert rep.diagnostics["rls_prediction"] == pytest.approx(
            x @ np.linalg.solve(Sigma / gamma - np.outer(x, x) / gamma, theta_prev),
            rel=1e-7,
            abs=1e-9,
        )
        if t % 97 == 0 or t == T - 1:
            P = model.P_[0]
            assert np.max(np.abs(P @ Sigma - np.eye(d))) <= 1e-8
            assert np.array_equal(P, P.T)
            np.linalg.cholesky(P)
            np.testing.assert_allclose(
                model.v_[0], np.linalg.solve(Sigma, theta), rtol=1e-8, atol=1e-10
            )
            assert model.logdet_[0] == pytest.approx(
                np.linalg.slogdet(Sigma)[1], rel=1e-9, abs=1e-8
            )


@pytest.mark.parametrize("gamma", [0.5, 0.9, 1.0])
def test_hint_isolation(gamma: float) -> None:
    # §8 item 4: hints never enter the state; y_hat is affine in the hint with slope rho_t
    X, y, h1 = gaussian(3, 300, seed=1)
    h2 = np.random.default_rng(2).standard_normal(300) * 5
    a = DiscountedVAW(3, gamma=gamma, hint="external")
    b = DiscountedVAW(3, gamma=gamma, hint="external")
    for x, v, p, q in zip(X, y, h1, h2, strict=True):
        rho = begin(a.P_, a.v_, x, a._gamma).rho[0]
        ya = a.learn(x, float(v), hint=float(p)).prediction
        yb = b.learn(x, float(v), hint=float(q)).prediction
        assert ya - yb == pytest.approx(rho * (p - q), rel=1e-8, abs=1e-12)
        for name in ("P_", "v_", "Sigma_", "theta_", "ridge_", "logdet_"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.mark.parametrize(("d", "lam", "gamma"), GRID[::3])
def test_ftrl_stationarity_and_md_recursion(d: int, lam: float, gamma: float) -> None:
    # §8 item 5: Eq. (6) gradient at w_t is 0; Eq. (7) consequence (§3.3)
    X, y, h = gaussian(d, 300, seed=7 * d)
    tr = Trace(X, y, h, gamma, lam)
    for t in range(1, 300):  # round t + 1 in 1-based terms
        w, x = tr.w_impl[t], X[t]
        prev_sigma = tr.Sigma[t]  # Sigma_{t-1} (1-based), includes gamma^{t-1} lam I
        grad = -(h[t] - x @ w) * x + gamma * (prev_sigma @ w - tr.theta[t])
        scale = 1.0 + np.abs(tr.Sigma[t + 1] @ w).max()
        assert np.abs(grad).max() <= 1e-8 * scale
        lhs = tr.Sigma[t + 1] @ w
        rhs = (
            gamma * prev_sigma @ tr.w_impl[t - 1]
            + gamma * (y[t - 1] - h[t - 1]) * X[t - 1]
            + h[t] * x
        )
        assert np.abs(lhs - rhs).max() <= 1e-8 * scale


@pytest.mark.parametrize("seed", range(4))
def test_self_confident_fixed_point(seed: int) -> None:
    # §8 item 6: y~ = Clip_B(mu_t) solves y~ = Clip_B(<x_t, w_t(y~)>) to 1e-12
    X, y, _ = gaussian(3, 60, seed)
    model = DiscountedVAW(3, gamma=0.9, hint="self")
    rng = np.random.default_rng(seed + 100)
    for x, v in zip(X, y, strict=True):
        b = begin(model.P_, model.v_, x, model._gamma)
        mu = b.mu[0]
        centre = rng.normal()
        boxes = [
            (centre - abs(rng.normal()), centre + abs(rng.normal())),
            (mu + 0.5, mu + 2.0),  # strictly above mu
            (mu - 3.0, mu - 0.1),  # strictly below mu
            (centre, centre),  # degenerate
        ]
        for lo, hi in boxes:
            fixed = clip(mu, lo, hi)
            assert abs(clip(hinted(b, fixed)[0], lo, hi) - fixed) <= 1e-12 * (1 + abs(fixed))
        assert hinted(b, mu)[0] == mu  # B = R: the prediction is the RLS mu_t
        lo, hi = model.y_prev_ - model.M_, model.y_prev_ + model.M_
        expect = mu + b.rho[0] * (clip(mu, lo, hi) - mu)
        assert model.learn(x, float(v)).prediction == pytest.approx(expect, rel=1e-12, abs=1e-15)


def test_self_hint_without_clipping_is_rls() -> None:
    X, y, _ = gaussian(4, 200, 0)
    dvaw = DiscountedVAW(4, gamma=0.95, hint="self", stabilised=False)
    rls = RLS(4, forgetting=0.95, delta=1.0)
    for x, v in zip(X, y, strict=True):
        assert dvaw.learn(x, float(v)).diagnostics["rls_prediction"] == pytest.approx(
            rls.learn(x, float(v)).prediction, rel=1e-12, abs=1e-14
        )


def comparators(kind: str, T: int, d: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "walk":
        return np.cumsum(0.1 * rng.standard_normal((T, d)), axis=0)
    if kind == "jumps":
        us = rng.standard_normal((T // 50 + 1, d))
        return us[np.arange(T) // 50]
    return np.tile(rng.standard_normal(d), (T, 1))


def erratum_stream() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """§9.1: d = 1, x = 10, y = 1 at t in {1, 2002}, zero otherwise; hints 0; u = 0.1."""
    T = 4000
    X, y = np.zeros((T, 1)), np.zeros(T)
    X[[0, 2001], 0] = 10.0
    y[[0, 2001]] = 1.0
    return X, y, np.zeros(T), np.full((T, 1), 0.1)


def regret_terms(tr: Trace, X, y, h, U, gamma: float, lam: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    T, d = X.shape
    regret = 0.5 * np.sum((y - tr.pred) ** 2) - 0.5 * np.sum((y - np.einsum("td,td->t", X, U)) ** 2)
    variability = sum(
        tr.F(t, U[t]) - tr.F(t, U[t - 1]) for t in range(1, T)
    )  # F_t(u_{t+1})-F_t(u_t)
    stability = 0.5 * np.sum((y - h) ** 2 * tr.rho)
    total_x = sum(gamma ** (T - 1 - t) * X[t] @ X[t] for t in range(T))
    log_term = math.log(1 + total_x / (lam * d))
    big = np.max((y - h) ** 2)
    return {
        "regret": regret,
        "valid": gamma * lam / 2 * U[0] @ U[0] + gamma * variability + stability,
        "stability": stability,
        "g2": d / 2 * big * (T * math.log(1 / gamma) + log_term),
        "printed": gamma * lam / 2 * U[0] @ U[0]
        + d / 2 * big * log_term
        + gamma * variability
        + d / 2 * math.log(1 / gamma) * np.sum((y - h) ** 2),
        "scale": float(np.sum((y - tr.pred) ** 2) + np.sum((y - h) ** 2) + 1.0),
    }


@pytest.mark.parametrize(
    ("kind", "gamma"), list(itertools.product(("walk", "jumps"), (0.5, 0.9, 0.99, 1.0)))
)
@pytest.mark.parametrize("d", [1, 3, 8])
def test_exact_regret_inequality(kind: str, gamma: float, d: int) -> None:
    # §8 item 7: valid form of Thm 3.1 (Lemmas A.3 + A.4), corrected Lemma G.2, per-step rho
    rng = np.random.default_rng(d * 31 + int(gamma * 100))
    lam = 1.0
    X, y, h = gaussian(d, 300, seed=d + 50)
    U = comparators(kind, 300, d, rng)
    y = np.einsum("td,td->t", X, U) + 0.5 * y
    tr = Trace(X, y, h, gamma, lam)
    r = regret_terms(tr, X, y, h, U, gamma, lam)
    assert r["regret"] <= r["valid"] + 1e-9 * r["scale"]
    assert r["stability"] <= r["g2"] + 1e-9 * r["scale"]
    steps = np.diff(tr.logdet) - d * math.log(gamma)  # ln det Sigma_t - ln det(gamma Sigma_{t-1})
    assert np.all(tr.rho <= steps + 1e-10)


def test_exact_regret_inequality_on_erratum_stream() -> None:
    X, y, h, U = erratum_stream()
    tr = Trace(X, y, h, 0.99, 1.0)
    r = regret_terms(tr, X, y, h, U, 0.99, 1.0)
    # the numbers spec §9.1 reports for this stream
    assert r["regret"] == pytest.approx(1.0, abs=1e-4)
    assert r["printed"] == pytest.approx(0.0150, abs=1e-4)
    assert r["valid"] == pytest.approx(1.00005, abs=1e-5)
    assert r["stability"] + 0.99 * 0.5 * 0.01 <= r["g2"] and r["g2"] == pytest.approx(
        20.1, abs=0.05
    )
    assert r["regret"] <= r["valid"] + 1e-9 * r["scale"]


@pytest.mark.xfail(
    strict=True,
    reason="erratum (spec §9.1): Lemma G.2 bounds a sum of possibly negative log-det ratios by "
    "their total, so the printed Thm 3.1 bound fails on this stream (regret 1.0 > RHS 0.015)",
)
def test_printed_thm31_bound_erratum() -> None:
    # §8 item 10: kept as a documented expected failure; never assert the printed form
    X, y, h, U = erratum_stream()
    tr = Trace(X, y, h, 0.99, 1.0)
    r = regret_terms(tr, X, y, h, U, 0.99, 1.0)
    assert r["regret"] <= r["printed"]


def p_beta(X: np.ndarray, y: np.ndarray, U: np.ndarray, beta: float, lam: float) -> float:
    """P^beta_T(u) of §1.3 by the O(T^2) definition (round 0 is the regulariser)."""
    T = X.shape[0]
    total = 0.0
    for t in range(1, T):  # 1-based t = 1..T-1 compares u_{t+1} with u_t
        new, old = U[t], U[t - 1]
        loss_new = np.concatenate([[lam / 2 * new @ new], 0.5 * (y[:t] - X[:t] @ new) ** 2])
        loss_old = np.concatenate([[lam / 2 * old @ old], 0.5 * (y[:t] - X[:t] @ old) ** 2])
        weights = beta ** (t - np.arange(t + 1))
        total += weights @ np.maximum(loss_new - loss_old, 0.0) / weights.sum()
    return total


def f_gamma(X: np.ndarray, y: np.ndarray, w: np.ndarray, t: int, gamma: float, lam: float) -> float:
    """F^gamma_t(w) = gamma^t lam/2 |w|^2 + sum_{s<=t} gamma^{t-s} l_s(w), by definition (§3.4)."""
    wts = gamma ** (t - np.arange(1, t + 1))
    return gamma**t * lam / 2 * w @ w + wts @ (0.5 * (y[:t] - X[:t] @ w) ** 2)


def test_lemma_32_without_stability_term() -> None:
    # §8 item 8: gamma sum[F_t(u_{t+1}) - F_t(u_t)] <= beta/(1-beta) P^beta_T(u), 40 trials
    rng = np.random.default_rng(123)
    for trial in range(40):
        d, T, lam = (
            int(rng.integers(1, 4)),
            int(rng.integers(20, 120)),
            float(rng.choice([0.5, 1, 3])),
        )
        gamma = float(rng.uniform(0.3, 0.98))
        beta = float(rng.uniform(gamma, 0.99))
        X = rng.standard_normal((T, d))
        U = comparators(("walk", "jumps")[trial % 2], T, d, rng)
        y = np.einsum("td,td->t", X, U) + rng.standard_normal(T)
        lhs = 0.0
        for t in range(1, T):
            lhs += gamma * (
                f_gamma(X, y, U[t], t, gamma, lam) - f_gamma(X, y, U[t - 1], t, gamma, lam)
            )
        rhs = beta / (1 - beta) * p_beta(X, y, U, beta, lam)
        assert lhs <= rhs + 1e-9 * (1 + abs(rhs)), (trial, lhs, rhs)


def rankdef(T: int, d: int, seed: int, subspace: bool) -> tuple[np.ndarray, np.ndarray]:
    """§7.1 `rankdef`: X[:, 7:] = 0, or rows in a random 7-dim subspace."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, d))
    if subspace:
        basis = np.linalg.qr(rng.standard_normal((d, 7)))[0]
        X = X[:, :7] @ basis.T
    else:
        X[:, 7:] = 0.0
    y = X @ rng.standard_normal(d) + 0.1 * rng.standard_normal(T)
    return X, y


@pytest.mark.slow
@pytest.mark.parametrize("subspace", [False, True])
def test_rankdef_stress(subspace: bool) -> None:
    # §8 item 15: exact mode winds up to non-finite values (documented failure mode of
    # the discounted regulariser, §3.7); stabilised mode stays finite and matches a direct
    # solve on its own Sigma to 1e-6 (1 + |.|)
    T, d, gamma = 20_000, 10, 20 / 21
    X, y = rankdef(T, d, 0, subspace)
    exact = DiscountedVAW(d, gamma=gamma, stabilised=False)
    stab = DiscountedVAW(d, gamma=gamma)
    first_bad = None
    with np.errstate(all="ignore"):
        for t in range(T):
            x = X[t]
            if first_bad is None:
                value = exact.learn(x, float(y[t])).diagnostics["rls_prediction"]
                if not math.isfinite(value) or not np.all(np.isfinite(exact.P_)):
                    first_bad = t + 1
            direct = x @ np.linalg.solve(stab.Sigma_[0], stab.theta_[0])
            mu = stab.learn(x, float(y[t])).diagnostics["rls_prediction"]
            assert math.isfinite(mu)
            assert abs(mu - direct) <= 1e-6 * (1 + abs(direct))
    assert first_bad is not None and first_bad < T
    assert stab.refreshes_ >= T // 64


def test_checkpoint_roundtrip_bit_identical() -> None:
    # §8 item 18
    X, y, h = gaussian(5, 400, 9)
    a = DiscountedVAW(5, gamma=0.9, hint="external", refresh=7)
    assert_resumes_bit_identically(a, X, y, 123, hints=h)


def test_edge_cases() -> None:
    # §8 item 19 / §3.7 item 6
    model = DiscountedVAW(3, gamma=0.9, hint="external")
    rep = model.learn(np.zeros(3), 2.0, hint=5.0)  # x = 0: q = rho = mu = 0, y_hat = 0
    assert rep.prediction == 0.0 and rep.diagnostics["leverage"] == 0.0
    np.testing.assert_allclose(model.P_[0], np.eye(3) / 0.9)  # inflated by 1/gamma
    one = DiscountedVAW(1, gamma=0.5)  # d = 1, T = 1
    assert one.learn(np.array([2.0]), 3.0).prediction == 0.0
    dup = DiscountedVAW(4, gamma=0.95)  # duplicate and collinear features
    rng = np.random.default_rng(0)
    for _ in range(3000):
        z = rng.normal(size=2)
        x = np.array([z[0], z[0], 2 * z[0], z[1]])
        rep = dup.learn(x, float(z[0] - z[1]))
    assert math.isfinite(rep.prediction) and rep.loss < 1e-2
    huge = DiscountedVAW(2, gamma=0.9, hint="self")
    for _ in range(50):
        rep = huge.learn(rng.normal(size=2), float(rng.normal() * 1e100))
    assert math.isfinite(rep.prediction)
