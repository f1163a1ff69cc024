"""Logistic and hinge slab-experts in d = 1 (``docs/algorithms/transductive.md``)."""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import linprog, minimize, minimize_scalar

from learners.transductive.logistic import log_sigmoid
from learners.transductive.offline.slab_1d import (
    bayes_mixture_1d,
    e3_stream,
    quadrature_grid,
    rms,
    slab_experts_1d,
    slab_hinge_1d,
    slab_logistic_1d,
    tg_logistic_1d,
)


def realised(lp: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(y > 0, lp[..., 0], lp[..., 1])


def test_item12_first_prediction_is_one_half() -> None:
    x, y = e3_stream(30, "logit5", 0)
    assert abs(math.exp(tg_logistic_1d(x, y)[0, 0]) - 0.5) <= 1e-12
    experts = slab_experts_1d(x)
    _, _, per = slab_logistic_1d(x, y, experts=experts, return_experts=True)
    inside = np.abs(experts[:, None] * x[None, :]) <= 1.0
    checked = 0
    for e in range(len(experts)):
        rounds = np.flatnonzero(inside[e])
        if rounds.size:  # the expert's first in-slab round: no in-slab history yet
            assert abs(math.exp(per[rounds[0], e, 0]) - 0.5) <= 1e-12
            checked += 1
    assert checked > 0


def test_item13_bayes_chain_rule() -> None:
    x, y = e3_stream(40, "logit5", 1)
    lam = 1.0 / len(x)
    theta, logw = quadrature_grid(1.0 / rms(x))
    log_prior = logw - 0.5 * lam * theta**2 * float(x @ x)
    sequential = -float(np.sum(realised(bayes_mixture_1d(x, y, theta, log_prior), y)))
    joint = log_prior + np.sum(log_sigmoid(y[:, None] * theta[None, :] * x[:, None]), axis=0)

    def lse(a: np.ndarray) -> float:
        m = float(np.max(a))
        return m + math.log(float(np.sum(np.exp(a - m))))

    one_shot = -(lse(joint) - lse(log_prior))
    assert abs(sequential - one_shot) <= 1e-8


def test_item14_aggregation_regret_at_most_log_experts() -> None:
    for case in ("sep", "logit5"):
        x, y = e3_stream(40, case, 2)
        lp, expert_loss, per = slab_logistic_1d(x, y, return_experts=True)
        L_alg = -float(np.sum(realised(lp, y)))
        L_e = -np.sum(realised(per, y[:, None]), axis=0)
        assert np.allclose(L_e, expert_loss, rtol=1e-12)
        assert L_alg <= float(L_e.min()) + math.log(len(L_e)) + 1e-9


def _partitions(thetas: np.ndarray, X: np.ndarray) -> set[tuple[int, ...]]:
    """Distinct partitions of X (rows) induced by the slab-experts ``thetas`` (rows):
    each point is below the slab, inside |theta.x| <= 1, or above it."""
    m = thetas @ X.T
    states = np.where(np.abs(m) <= 1.0, 0, np.sign(m)).astype(np.int8)
    return {tuple(r) for r in np.unique(states, axis=0)}


def test_item15_expert_count() -> None:
    T = 25
    x, _ = e3_stream(T, "sep", 3)
    experts = slab_experts_1d(x)
    assert len(experts) == 2 * T + 1
    parts = _partitions(experts[:, None], x[:, None])
    assert len(parts) == 2 * T + 1
    # probing both sides of every breakpoint reaches every cell, and finds no other partition
    b = np.concatenate([1.0 / x, -1.0 / x])
    sweep = np.concatenate([b * (1 - 1e-9), b * (1 + 1e-9), np.linspace(-1e6, 1e6, 20_001)])
    assert _partitions(sweep[:, None], x[:, None]) == parts
    # 2-D: the cells of the arrangement of the 2T lines theta.x = +-1
    rng = np.random.default_rng(15)
    X2 = rng.normal(size=(10, 2))
    dirs = rng.normal(size=(40_000, 2))
    radii = 10.0 ** rng.uniform(-2, 3, size=(40_000, 1))
    cells = _partitions(dirs / np.linalg.norm(dirs, axis=1)[:, None] * radii, X2)
    bound = sum(math.comb(2 * len(X2), i) for i in range(3))
    assert len(cells) <= bound


def test_item16_misclassified_margins_are_bounded() -> None:
    rng = np.random.default_rng(16)
    T, d, gamma = 60, 3, 0.5
    X = rng.normal(size=(T, d)) * [1.0, 10.0, 0.1]
    y = np.where(X @ [1.0, 0.1, -5.0] + rng.normal(size=T) > 0, 1.0, -1.0)
    y[:5] *= -1  # make sure the data are not separable

    def logistic(th: np.ndarray) -> tuple[float, np.ndarray]:
        m = y * (X @ th)
        grad = -(X * (y * np.exp(log_sigmoid(-m)))[:, None]).sum(axis=0) + 2e-8 * th
        return float(np.sum(np.logaddexp(0.0, -m)) + 1e-8 * th @ th), grad

    th = minimize(logistic, np.zeros(d), jac=True, method="L-BFGS-B").x
    wrong = y * (X @ th) < 0
    assert wrong.any()
    assert np.all(np.abs(X[wrong] @ th) <= T * math.log(2))  # Lemma 10
    # hinge optimum by LP: min sum xi, xi >= 1 - y theta.x / gamma, xi >= 0
    c = np.concatenate([np.zeros(d), np.ones(T)])
    A = np.hstack([-(y[:, None] * X) / gamma, -np.eye(T)])
    bounds = [(None, None)] * d + [(0, None)] * T
    th_h = linprog(c, A_ub=A, b_ub=-np.ones(T), bounds=bounds, method="highs").x[:d]
    wrong = y * (X @ th_h) < 0
    assert wrong.any()
    assert np.all(np.abs(X[wrong] @ th_h) <= gamma * (T - 1) + 1e-9)  # Lemma 19


def test_item17_hinge_outputs_in_range() -> None:
    for gamma in (1e-1, 1e-3):
        rng = np.random.default_rng(17)
        x = rng.uniform(-1, 1, size=40)
        x = x[np.abs(x) >= gamma]
        y = np.where(x > 0, 1.0, -1.0)
        y[::7] *= -1
        pred, losses = slab_hinge_1d(x, y, gamma)
        assert np.all(np.abs(pred) <= gamma)
        assert np.all(np.isfinite(losses))


def test_item19_proposition15_bound_on_e3() -> None:
    for seed in range(3):
        x, y = e3_stream(50, "logit5", seed)
        lam = 1.0 / len(x)
        L_alg = -float(np.sum(realised(tg_logistic_1d(x, y, lam), y)))

        def L(t: float, x: np.ndarray = x, y: np.ndarray = y) -> float:
            return float(np.sum(np.logaddexp(0.0, -y * t * x)))

        th = minimize_scalar(L, bracket=(0.0, 1e3), tol=1e-12).x
        assert math.isfinite(th)
        bound = lam / 2 * float(np.sum((th * x) ** 2)) + 0.5 * math.log1p(1 / (4 * lam))
        assert L_alg - L(th) <= bound
