"""APAS projections and prox (``docs/algorithms/apas.md``), with CVXPY cross-checks."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from learners._prox import (
    gamma_schedule,
    project_l1_ball,
    project_simplex,
    projection,
    sca_prox,
)
from learners._side import ScaSettings, SideInfo

cp = pytest.importorskip("cvxpy")

DIMS = (2, 5, 100)
SEEDS = range(5)
FEASIBLE = ("simplex", "l1_ball", "none")
RADIUS = 0.8


def instance(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Speed-study generator (§5.7): x, the held weight w_t, and w^ = w_t + noise."""
    rng = np.random.default_rng(seed)
    x = 5e-4 + 1e-2 * rng.normal(size=n)
    w_t = rng.dirichlet(np.ones(n))
    w_hat = w_t + 1e-3 * rng.normal(size=n)
    return x, w_t, w_hat


def make_side(name: str, x: np.ndarray, w_t: np.ndarray, seed: int = 0) -> SideInfo:
    n = x.size
    rng = np.random.default_rng(1000 + seed)
    if name == "weighted_l1":
        return SideInfo(name, x, w_t, rng.uniform(0.0, 1.0, n), np.zeros(n, dtype=np.intp))
    if name == "turnover":
        return SideInfo(name, x, w_t, np.array([1.0]), np.zeros(n, dtype=np.intp))
    if name == "group_lasso":
        m = min(10, n)
        groups = np.concatenate(
            [np.full(p.size, j) for j, p in enumerate(np.array_split(np.arange(n), m))]
        ).astype(np.intp)
        return SideInfo(name, x, w_t, np.sqrt(np.bincount(groups).astype(float)), groups)
    return SideInfo(name, x, w_t, np.zeros(1), np.zeros(n, dtype=np.intp))


def cvx_prox(side: SideInfo, w_hat: np.ndarray, lam: float, feasible: str) -> np.ndarray:
    """High-accuracy conic solve of (5) (§4.1): SCS at eps = 1e-12; Clarabel for the
    unconstrained log (SCS is slow there). Tolerances this tight may be flagged
    'inaccurate': the assertion on the answer decides."""
    n = w_hat.size
    w = cp.Variable(n)
    if side.name == "log_return":
        h = -cp.log(1 + side.x @ w)
    elif side.name == "weighted_l1":
        h = side.rho @ cp.abs(w)
    elif side.name == "turnover":
        h = side.rho[0] * cp.norm1(w - side.anchor)
    elif side.name == "group_lasso":
        h = sum(
            side.rho[j] * cp.norm2(w[np.flatnonzero(side.groups == j)])
            for j in range(side.rho.size)
        )
    else:
        h = 0
    cons = []
    if feasible == "simplex":
        cons = [cp.sum(w) == 1, w >= 0]
    elif feasible == "l1_ball":
        cons = [cp.norm1(w) <= RADIUS]
    prob = cp.Problem(cp.Minimize(h + cp.sum_squares(w - w_hat) / (2 * lam)), cons)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        if side.name == "log_return" and feasible == "none":
            prob.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
        else:
            prob.solve(solver=cp.SCS, eps=1e-12, max_iters=500_000)
    return np.asarray(w.value)


def in_set(w: np.ndarray, feasible: str, tol: float = 1e-10) -> bool:
    if feasible == "simplex":
        return abs(w.sum() - 1.0) <= tol and w.min() >= 0.0
    if feasible == "l1_ball":
        return float(np.abs(w).sum()) <= RADIUS + tol
    return bool(np.all(np.isfinite(w)))


def random_q(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scale = (1e-2, 1.0, 10.0)[seed % 3]
    return scale * rng.normal(size=n)


# ---- 1. simplex projection ------------------------------------------------------------------
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_simplex_projection_properties(n: int, seed: int) -> None:
    q = random_q(n, seed)
    w = project_simplex(q)
    assert abs(w.sum() - 1.0) <= 1e-12 and w.min() >= 0.0
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(n))
    np.testing.assert_allclose(project_simplex(p), p, rtol=0, atol=1e-12)  # idempotent
    np.testing.assert_allclose(project_simplex(w), w, rtol=0, atol=1e-12)
    c = rng.normal() * 5.0
    np.testing.assert_allclose(project_simplex(q + c), w, rtol=0, atol=1e-12)  # shift
    perm = rng.permutation(n)
    np.testing.assert_array_equal(project_simplex(q[perm]), w[perm])  # permutations
    # KKT: w_i = q_i + kappa on the support, q_i + kappa <= 0 off it.
    support = w > 0
    kappa = float(np.mean(w[support] - q[support]))
    np.testing.assert_allclose(w[support], q[support] + kappa, rtol=0, atol=1e-12)
    assert np.all(q[~support] + kappa <= 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("seed", range(3))
def test_simplex_projection_matches_cvxpy(n: int, seed: int) -> None:
    q = random_q(n, seed)
    w = cp.Variable(n)
    cp.Problem(cp.Minimize(cp.sum_squares(w - q)), [cp.sum(w) == 1, w >= 0]).solve(
        solver=cp.SCS, eps=1e-12, max_iters=500_000
    )
    np.testing.assert_allclose(project_simplex(q), w.value, rtol=0, atol=1e-8)


# ---- 2. l1-ball projection ------------------------------------------------------------------
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_l1_ball_projection(n: int, seed: int) -> None:
    q = random_q(n, seed)
    norm = float(np.abs(q).sum())
    inside = project_l1_ball(q, 2.0 * norm)
    np.testing.assert_array_equal(inside, q)
    for c in (0.1 * norm, 0.5 * norm, 0.99 * norm):
        w = project_l1_ball(q, c)
        assert abs(np.abs(w).sum() - c) <= 1e-12 * max(1.0, c)
        assert np.all((np.sign(w) == 0) | (np.sign(w) == np.sign(q)))


# ---- 3. SCA prox ----------------------------------------------------------------------------
def log_prox(x, w_hat, lam, feasible, on_iterate=None, tol=1e-10):  # type: ignore[no-untyped-def]
    side = make_side("log_return", x, w_hat)
    proj = projection(feasible, RADIUS)
    return sca_prox(w_hat, lam, side.grad, proj, proj(w_hat), tol=tol, on_iterate=on_iterate)


@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("lam", (1e-3, 5e-2, 1.0, 1e2))
def test_sca_prox_feasible_fixed_point(feasible: str, n: int, lam: float) -> None:
    x, _, w_hat = instance(n, seed=n)
    iterates: list[np.ndarray] = []
    res = log_prox(x, w_hat, lam, feasible, on_iterate=lambda w: iterates.append(w.copy()))
    assert res.converged
    assert in_set(res.w, feasible)
    assert iterates and all(in_set(w, feasible) for w in iterates)
    side = make_side("log_return", x, w_hat)
    fixed = projection(feasible, RADIUS)(w_hat - lam * side.grad(res.w))
    assert np.max(np.abs(res.w - fixed)) <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("lam", (1e-2, 1.0))
def test_sca_prox_matches_cvxpy(feasible: str, n: int, lam: float) -> None:
    x, _, w_hat = instance(n, seed=7 + n)
    res = log_prox(x, w_hat, lam, feasible)
    ref = cvx_prox(make_side("log_return", x, w_hat), w_hat, lam, feasible)
    assert np.max(np.abs(res.w - ref)) <= 1e-7


@pytest.mark.slow
@pytest.mark.parametrize("name", ("weighted_l1", "turnover", "group_lasso"))
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", (5, 100))
def test_exact_nonsmooth_prox_matches_cvxpy(name: str, feasible: str, n: int) -> None:
    lam = 5e-3 if name != "turnover" else 5e-4
    x, w_t, w_hat = instance(n, seed=3 * n)
    side = make_side(name, x, w_t)
    res = side.prox(w_hat, lam, feasible, RADIUS, ScaSettings())
    assert in_set(res.w, feasible, tol=1e-12)
    ref = cvx_prox(side, w_hat, lam, feasible)
    assert np.max(np.abs(res.w - ref)) <= 1e-7


# ---- 4. step sizes --------------------------------------------------------------------------
def test_gamma_schedule() -> None:
    g = gamma_schedule(1.0, 0.01, 100_000)
    assert np.all((g > 0.0) & (g <= 1.0))
    assert np.all(np.diff(g) < 0.0)
    partial = np.cumsum(g)
    # gamma^k ~ 1/(rho k): the partial sums keep growing like log(k)/rho.
    for k in (1_000, 10_000):
        assert partial[10 * k - 1] - partial[k - 1] > 0.9 * np.log(10.0) / 0.01


# ---- 5. h = 0 ----------------------------------------------------------------------------
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
def test_prox_of_zero_is_projection(feasible: str, n: int) -> None:
    x, w_t, w_hat = instance(n, seed=11)
    proj = projection(feasible, RADIUS)
    res = make_side("none", x, w_t).prox(w_hat, 0.3, feasible, RADIUS, ScaSettings())
    np.testing.assert_array_equal(res.w, proj(w_hat))
    zero = sca_prox(w_hat, 0.3, lambda w: np.zeros_like(w), proj, proj(w_hat))
    np.testing.assert_array_equal(zero.w, proj(w_hat))
    if feasible == "none":
        np.testing.assert_array_equal(res.w, w_hat)


# ---- 6. lambda -> 0 and lambda -> inf -----------------------------------------------------
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("feasible", FEASIBLE)
def test_small_lambda_is_lazy_projection(n: int, feasible: str) -> None:
    x, _, w_hat = instance(n, seed=21)
    res = log_prox(x, w_hat, 1e-9, feasible)
    assert np.max(np.abs(res.w - projection(feasible, RADIUS)(w_hat))) <= 1e-6


@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("seed", SEEDS)
def test_huge_lambda_picks_best_asset(n: int, seed: int) -> None:
    x, _, w_hat = instance(n, seed)
    assert np.unique(x).size == n
    res = log_prox(x, w_hat, 1e6, "simplex")
    vertex = np.zeros(n)
    vertex[np.argmax(x)] = 1.0
    assert np.max(np.abs(res.w - vertex)) <= 1e-9


# ---- 7-9. prox inequalities ---------------------------------------------------------------
SIDES = ("log_return", "weighted_l1", "turnover", "group_lasso")


def prox_of(name: str, side: SideInfo, w_hat: np.ndarray, lam: float, feasible: str):  # type: ignore[no-untyped-def]
    return side.prox(w_hat, lam, feasible, RADIUS, ScaSettings(tol=1e-13, max_iter=1000)).w


@pytest.mark.parametrize("name", SIDES)
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
def test_side_information_improves(name: str, feasible: str, n: int) -> None:
    for seed in SEEDS:
        x, w_t, w_hat = instance(n, seed)
        side = make_side(name, x, w_t, seed)
        w_plus = prox_of(name, side, w_hat, 5e-2, feasible)
        w_proj = projection(feasible, RADIUS)(w_hat)
        assert side.value(w_plus) <= side.value(w_proj) + 1e-12
        if name == "log_return":
            assert x @ w_plus >= x @ w_proj - 1e-12
        assert np.linalg.norm(w_plus - w_hat) >= np.linalg.norm(w_proj - w_hat) - 1e-12


@pytest.mark.parametrize("name", SIDES)
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
def test_lambda_monotonicity(name: str, feasible: str, n: int) -> None:
    lams = (1e-4, 1e-3, 1e-2, 5e-2, 0.2, 1.0)
    for seed in SEEDS:
        x, w_t, w_hat = instance(n, seed)
        side = make_side(name, x, w_t, seed)
        sols = [prox_of(name, side, w_hat, lam, feasible) for lam in lams]
        for w1, w2 in zip(sols, sols[1:], strict=False):
            assert side.value(w2) <= side.value(w1) + 1e-12
            assert np.linalg.norm(w2 - w_hat) >= np.linalg.norm(w1 - w_hat) - 1e-12


@pytest.mark.parametrize("name", SIDES)
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
def test_prox_is_nonexpansive(name: str, feasible: str, n: int) -> None:
    rng = np.random.default_rng(n)
    for seed in SEEDS:
        x, w_t, u = instance(n, seed)
        v = u + rng.normal(size=n) * 10.0 ** rng.uniform(-5, -1)
        side = make_side(name, x, w_t, seed)
        pu = prox_of(name, side, u, 5e-2, feasible)
        pv = prox_of(name, side, v, 5e-2, feasible)
        assert np.linalg.norm(pu - pv) <= np.linalg.norm(u - v) + 1e-12


# ---- 23. scaling h by c is scaling lambda by c ----------------------------------------------
@pytest.mark.parametrize("feasible", FEASIBLE)
@pytest.mark.parametrize("n", DIMS)
@pytest.mark.parametrize("c", (0.1, 3.0, 40.0))
def test_scaling_h_equals_scaling_lambda(feasible: str, n: int, c: float) -> None:
    lam = 2e-2
    x, w_t, w_hat = instance(n, seed=5)
    side = make_side("log_return", x, w_t)
    proj = projection(feasible, RADIUS)
    a = sca_prox(w_hat, lam, lambda w: c * side.grad(w), proj, proj(w_hat), tol=1e-13)
    b = sca_prox(w_hat, c * lam, side.grad, proj, proj(w_hat), tol=1e-13)
    assert np.max(np.abs(a.w - b.w)) <= 1e-11
    wl1 = make_side("weighted_l1", x, w_t)
    scaled = SideInfo("weighted_l1", x, w_t, c * wl1.rho, wl1.groups)
    pa = scaled.prox(w_hat, lam, feasible, RADIUS, ScaSettings()).w
    pb = wl1.prox(w_hat, c * lam, feasible, RADIUS, ScaSettings()).w
    assert np.max(np.abs(pa - pb)) <= 1e-12
