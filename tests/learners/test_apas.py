"""APAS threshold adaptation and checkpointing: ``docs/algorithms/apas.md``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learners import REGISTRY, decode_state, encode_state
from learners.apas import APASRegressor
from learners.checks import assert_states_equal

NU, D = 1e-4, 5e-3
CONFIGS = [
    {},
    {"variant": "pa2", "C": 25.0},
    {"variant": "pa1", "C": 0.5},
    {"lam": 0.2},
    {"lam": 1e-3, "epsilon": 1e-4},
    {"side": "none"},
    {"side": "weighted_l1", "lam": 1e-3},
    {"side": "turnover", "lam": 1e-3},
    {"side": "group_lasso", "lam": 1e-4},
    {"feasible": "l1_ball", "radius": 1.0},
    {"feasible": "none"},
    {"side": "turnover", "feasible": "l1_ball", "lam": 1e-3},
]


def stream(n: int, dim: int, seed: int, noise: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """Index tracking at daily-return scale: y = x.w* + noise, w* ~ Dirichlet(1)."""
    rng = np.random.default_rng(seed)
    X = 5e-4 + 1e-2 * rng.normal(size=(n, dim))
    y = X @ rng.dirichlet(np.ones(dim)) + noise * rng.normal(size=n)
    return X, y


def in_set(w: np.ndarray, model: APASRegressor) -> bool:
    if model.feasible == "simplex":
        return abs(w.sum() - 1.0) <= 1e-10 and w.min() >= 0.0
    if model.feasible == "l1_ball":
        return float(np.abs(w).sum()) <= model.radius + 1e-10
    return True


# ---- 14. invariants ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params", CONFIGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items())
)
@pytest.mark.parametrize("dim", (2, 5, 100))
def test_invariants_after_every_update(params: dict, dim: int) -> None:
    model = APASRegressor(dim, **params)
    X, y = stream(150, dim, seed=dim)
    X[40] = 0.0  # x = 0 edge case (§2.6)
    for x, target in zip(X, y, strict=True):
        t = model.t_
        rep = model.learn(x, float(target))
        assert model.t_ == t + 1
        assert NU <= model.eps_ <= D
        assert in_set(model.w_, model)
        assert np.all(np.isfinite(model.w_)) and math.isfinite(model.eps_)
        assert all(math.isfinite(v) for v in rep.diagnostics.values())


# ---- 15. derivative against finite differences -----------------------------------------------
@pytest.mark.parametrize("variant", ("pa", "pa2"))
@pytest.mark.parametrize("dim", (5, 100))
def test_derivative_matches_finite_difference(variant: str, dim: int) -> None:
    h = 1e-8
    model = APASRegressor(dim, variant=variant, lam=5e-2)
    X, y = stream(300, dim, seed=dim + 1)
    checked = 0
    for x, target in zip(X, y, strict=True):
        eps = model.eps_
        a = abs(model.weights @ x - target)
        fd = None
        if eps + 10 * h < min(a, D) and eps - h > 0:
            f_up = model.epsilon_loss(x, target, eps + h, tol=1e-14)
            f_dn = model.epsilon_loss(x, target, eps - h, tol=1e-14)
            fd = (f_up - f_dn) / (2 * h)
        d = model.learn(x, float(target)).diagnostics["derivative"]
        if fd is not None:
            assert abs(d - fd) <= 1e-4 * max(abs(fd), 1e-3), (d, fd)
            checked += 1
    assert checked >= 20


# ---- 16. shape of f_t ---------------------------------------------------------------------------
@pytest.mark.parametrize("dim", (5, 100))
def test_shape_of_f(dim: int) -> None:
    lam = 5e-2
    model = APASRegressor(dim, lam=lam)
    X, y = stream(60, dim, seed=dim + 2)
    shapes = 0
    for x, target in zip(X, y, strict=True):
        a = abs(model.weights @ x - target)
        if a > 2 * NU:
            nx = float(x @ x)
            f = lambda e, x=x, target=target: model.epsilon_loss(x, target, e, tol=1e-14)  # noqa: E731
            flat = [f(e) for e in (a, a * 1.01, a * 1.5, a + D, 10 * a)]
            assert all(v == flat[0] for v in flat)  # constant on [a, inf)
            grid = np.linspace(0.0, a, 51)[:-1]
            step = grid[1] - grid[0]
            vals = np.array([f(e) for e in grid])
            slopes = np.diff(vals) / step
            jumps = np.diff(slopes)
            assert np.all(jumps >= -1e-9)  # convex on [0, a)
            assert np.all(jumps <= step / (lam * nx) + 1e-9)  # f' is 1/(lam ||x||^2)-Lipschitz
            lip = max(np.abs(slopes).max(), 1e-12) * 2
            assert abs(f(a - 1e-9) - flat[0]) <= lip * 1e-9 + 1e-15  # continuous at a
            shapes += 1
        model.learn(x, float(target))
    assert shapes >= 10


# ---- 17. sign rules ------------------------------------------------------------------------------
@pytest.mark.parametrize("params", CONFIGS[:5])
def test_sign_rules_on_a_stream(params: dict) -> None:
    model = APASRegressor(20, **params)
    X, y = stream(300, 20, seed=5)
    seen = {"passive": 0, "tiny": 0}
    for x, target in zip(X, y, strict=True):
        eps, a = model.eps_, abs(model.weights @ x - target)
        model.learn(x, float(target))
        if a <= eps:
            assert model.eps_ <= eps
            seen["passive"] += 1
        if a < NU:
            assert model.eps_ == eps
            seen["tiny"] += 1
    assert seen["passive"] > 0


def test_sign_rules_constructed() -> None:
    rng = np.random.default_rng(0)
    for seed in range(20):
        model = APASRegressor(10, lam=rng.choice([1e-3, 5e-2, 1.0]), variant="pa")
        X, y = stream(30, 10, seed=seed)
        for x, target in zip(X, y, strict=True):
            model.learn(x, float(target))
        x = X[-1]
        # |e| < nu: epsilon unchanged
        eps = model.eps_
        model.learn(x, float(model.weights @ x) + 0.5 * NU)
        assert model.eps_ == eps
        # aggressive at the upper bound: epsilon = D and |e| > D
        model.eps_ = D
        model.learn(x, float(model.weights @ x) + 3 * D * (1 if seed % 2 else -1))
        assert model.eps_ <= D


# ---- 18. Prop. 3 per round ---------------------------------------------------------------------
@pytest.mark.parametrize("variant", ("pa", "pa2"))
@pytest.mark.parametrize("lam", (1e-2, 1e-1))
def test_first_order_bound_prop_3(variant: str, lam: float) -> None:
    model = APASRegressor(20, lam=lam, variant=variant)
    X, y = stream(100, 20, seed=int(lam * 1000))
    grid = np.linspace(NU, D, 50)
    for x, target in zip(X, y, strict=True):
        v = model.eps_
        zeta = min(max(abs(model.weights @ x - target), NU), D)
        f_v = model.epsilon_loss(x, target, v)
        f_u = np.array([model.epsilon_loss(x, target, u) for u in grid])
        g = model.learn(x, float(target)).diagnostics["derivative"]
        assert np.all(f_v - f_u <= g * (v - np.minimum(grid, zeta)) + 1e-10)


# ---- 19. regret ------------------------------------------------------------------------------
def run_with_losses(G: float, X: np.ndarray, y: np.ndarray, grid: np.ndarray):  # type: ignore[no-untyped-def]
    model = APASRegressor(X.shape[1], lam=5e-2, G=G)
    alg, on_grid, max_slope = 0.0, np.zeros(grid.size), 0.0
    for x, target in zip(X, y, strict=True):
        alg += model.epsilon_loss(x, target, model.eps_)
        f = np.array([model.epsilon_loss(x, target, e) for e in grid])
        on_grid += f
        d = model.learn(x, float(target)).diagnostics["derivative"]
        max_slope = max(max_slope, abs(d), np.abs(np.diff(f) / np.diff(grid)).max())
    return alg - on_grid.min(), max_slope


@pytest.mark.slow
def test_regret_bound() -> None:
    T = 200
    X, y = stream(T, 20, seed=19)
    grid = np.linspace(NU, D, 50)
    _, observed = run_with_losses(1.0, X, y, grid)
    G = 1.5 * observed
    regret, max_d = run_with_losses(G, X, y, grid)
    assert max_d <= G
    assert regret <= 2.0 * math.sqrt(D**3 * G**2 / NU) * math.sqrt(T)
    assert regret <= T * max_d * (D - NU)


# ---- 20. step size ---------------------------------------------------------------------------
def test_step_size_by_hand() -> None:
    dim = 10
    X, _ = stream(1, dim, seed=20)
    x = X[0]
    first = APASRegressor(dim, G=2.0)
    y = float(first.weights @ x) - 2e-3  # |e| = 2e-3 in [nu, D], so zeta = 2e-3
    r1 = first.learn(x, y)
    fourth = APASRegressor(dim, G=2.0)
    fourth.t_ = 4
    r4 = fourth.learn(x, y)
    zeta = abs(float(APASRegressor(dim).weights @ x) - y)
    assert r1.diagnostics["step_size"] == pytest.approx(
        zeta * math.sqrt(D) / (2.0 * math.sqrt(NU) * math.sqrt(1)), rel=1e-12
    )
    assert r1.diagnostics["step_size"] == pytest.approx(
        2.0 * r4.diagnostics["step_size"], rel=1e-12
    )


# ---- 21. PAS ---------------------------------------------------------------------------------
@pytest.mark.parametrize("eps", (1e-4, 5e-4, 1e-3, 5e-3, 2e-2))
def test_pas_keeps_epsilon_fixed(eps: float) -> None:
    model = APASRegressor(20, adaptive=False, epsilon=eps, lam=5e-2)
    X, y = stream(200, 20, seed=21)
    for x, target in zip(X, y, strict=True):
        rep = model.learn(x, float(target))
        assert model.eps_ == eps and rep.diagnostics["epsilon"] == eps


# ---- 22. determinism and checkpointing -------------------------------------------------------
@pytest.mark.parametrize(
    "params", CONFIGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items())
)
def test_determinism_and_checkpoint(params: dict) -> None:
    X, y = stream(200, 30, seed=22)
    one = REGISTRY["apas"](30, **params)
    two = REGISTRY["apas"](30, **params)
    for x, target in zip(X, y, strict=True):
        one.learn(x, float(target))
        two.learn(x, float(target))
    assert_states_equal(one.state(), two.state())
    k = 80
    first = REGISTRY["apas"](30, **params)
    for x, target in zip(X[:k], y[:k], strict=True):
        first.learn(x, float(target))
    blob = encode_state(first.state())
    resumed = REGISTRY["apas"].from_state(decode_state(blob))
    for x, target in zip(X[k:], y[k:], strict=True):
        resumed.learn(x, float(target))
    assert_states_equal(one.state(), resumed.state())


def test_checkpoint_without_t_would_diverge() -> None:
    """The round counter enters eta_t: a restore that reset t ends somewhere else."""
    X, y = stream(200, 30, seed=22)
    full = APASRegressor(30)
    for x, target in zip(X, y, strict=True):
        full.learn(x, float(target))
    part = APASRegressor(30)
    for x, target in zip(X[:80], y[:80], strict=True):
        part.learn(x, float(target))
    state = part.state()
    state["t_"] = 1
    reset = APASRegressor.from_state(state)
    for x, target in zip(X[80:], y[80:], strict=True):
        reset.learn(x, float(target))
    assert reset.eps_ != full.eps_ or not np.array_equal(reset.w_, full.w_)


def test_bad_cross_parameters() -> None:
    with pytest.raises(ValueError, match="'D'"):
        APASRegressor(3, nu=1e-2, D=1e-3)
    with pytest.raises(ValueError, match="'epsilon'"):
        APASRegressor(3, epsilon=1.0)
    APASRegressor(3, epsilon=1.0, adaptive=False)
    with pytest.raises(ValueError, match="'rho'"):
        APASRegressor(3, rho=1.0)
    with pytest.raises(ValueError, match="'rho'"):
        APASRegressor(3, side="weighted_l1", rho=[1.0, 2.0])
    with pytest.raises(ValueError, match="'rho'"):
        APASRegressor(3, side="turnover", rho=[1.0])
    with pytest.raises(ValueError, match="'groups'"):
        APASRegressor(3, side="group_lasso", groups=[0, 1])
    with pytest.raises(ValueError, match="'groups'"):
        APASRegressor(3, groups=[0, 1, 1])


def test_weights_and_portfolio_summary() -> None:
    X, y = stream(50, 8, seed=30)
    model = APASRegressor(8, lam=5e-2)
    np.testing.assert_array_equal(model.weights, np.full(8, 1 / 8))  # w_1 = Pi_simplex(0)
    for x, target in zip(X, y, strict=True):
        rep = model.learn(x, float(target))
    w = model.weights
    with pytest.raises(ValueError):
        w[0] = 1.0  # read-only view
    summary = model.portfolio_summary()
    assert summary["budget"] == pytest.approx(1.0, abs=1e-12)
    assert summary["active_assets"] == rep.diagnostics["active_assets"]
    assert summary["epsilon"] == model.eps_ == rep.diagnostics["epsilon"]
    assert summary["rounds"] == 50


def test_side_weight_defaults() -> None:
    lasso = APASRegressor(23, side="group_lasso")
    sizes = np.bincount(lasso._groups)
    assert sizes.size == 10 and sizes.sum() == 23 and sizes.max() - sizes.min() <= 1
    np.testing.assert_allclose(lasso._rho, np.sqrt(sizes))
    relabelled = APASRegressor(4, side="group_lasso", groups=[7, 7, 3, 3], rho=[1.0, 2.0])
    np.testing.assert_array_equal(relabelled._groups, [1, 1, 0, 0])
    a = APASRegressor(5, side="weighted_l1", rho=0.3)
    b = APASRegressor(5, side="weighted_l1", rho=[0.3] * 5)
    np.testing.assert_array_equal(a._rho, b._rho)
    X, y = stream(40, 5, seed=31)
    for x, target in zip(X, y, strict=True):
        a.learn(x, float(target))
        b.learn(x, float(target))
    np.testing.assert_array_equal(a.weights, b.weights)
