"""PA regression and the PA step of APAS: ``docs/algorithms/apas.md``."""

from __future__ import annotations

import numpy as np
import pytest

from learners import REGISTRY, _accel
from learners._prox import project_simplex
from learners.pa import pa_step_size

VARIANTS = ("pa", "pa1", "pa2")


def stream(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim)) / np.sqrt(dim)
    y = X @ rng.normal(size=dim) + 0.1 * rng.normal(size=n)
    X[n // 3] = 0.0  # a zero instance on the way
    return X, y


def crammer_pa(X: np.ndarray, y: np.ndarray, eps: float, variant: str, C: float) -> np.ndarray:
    """Hand-written Crammer et al. (2006) PA regression, Fig. 1 / eq. (2)-(3)."""
    w = np.zeros(X.shape[1])
    for x, target in zip(X, y, strict=True):
        loss = max(0.0, abs(w @ x - target) - eps)
        nx = x @ x
        if loss == 0.0 or (nx == 0.0 and variant != "pa2"):
            continue
        if variant == "pa":
            tau = loss / nx
        elif variant == "pa1":
            tau = min(C, loss / nx)
        else:
            tau = loss / (nx + 1.0 / (2.0 * C))
        w = w + np.sign(target - w @ x) * tau * x
    return w


def aggressive_case(seed: int, dim: int, eps: float) -> tuple[np.ndarray, np.ndarray, float]:
    """A weight, an instance and a label with |w.x - y| in (1.1, 6) * eps."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    x = rng.normal(size=dim) * 10.0 ** rng.uniform(-3, 0)
    y = float(w @ x + rng.choice([-1.0, 1.0]) * eps * rng.uniform(1.1, 6.0))
    return w, x, y


# ---- 10. passive rounds leave w untouched -----------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("kind", ("pa", "apas"))
def test_passive_round_keeps_w_bit_for_bit(variant: str, kind: str) -> None:
    rng = np.random.default_rng(3)
    for dim in (2, 5, 100):
        if kind == "pa":
            model = REGISTRY["pa"](dim, variant=variant, C=0.7, epsilon=0.05)
        else:
            model = REGISTRY["apas"](
                dim, variant=variant, C=0.7, side="none", feasible="none", D=1.0, epsilon=0.05
            )
        model.w_ = rng.normal(size=dim)
        x = rng.normal(size=dim)
        before = model.w_.copy()
        y = float(before @ x) + 0.04  # |w.x - y| = 0.04 <= epsilon
        model.learn(x, y)
        np.testing.assert_array_equal(model.w_, before)
        if kind == "apas":
            st = model._step(x, y, 0.05, model._sca)
            np.testing.assert_array_equal(st.w_hat, before)


# ---- 11. aggressive rounds: the new residual ------------------------------------------
@pytest.mark.parametrize("compiled", (False, True))
@pytest.mark.parametrize("dim", (2, 5, 100))
def test_aggressive_residuals(dim: int, compiled: bool) -> None:
    # pa's step is APAS's with side="none" (numpy code) bit for bit on the numpy path, to
    # rounding on the compiled one (w.x and x.x summed in index order, not by BLAS)
    if compiled and not _accel.available():
        pytest.skip("numba is not installed")
    _accel.use(compiled)
    try:
        _aggressive_residuals(dim, compiled)
    finally:
        _accel.use(None)


def _aggressive_residuals(dim: int, compiled: bool) -> None:
    eps, C = 1e-2, 0.3
    for seed in range(20):
        w, x, y = aggressive_case(seed, dim, eps)
        e = w @ x - y
        a, nx = abs(e), x @ x
        assert a > eps
        scale = max(abs(y), abs(w @ x), 1.0)
        steps = {}
        for variant in VARIANTS:
            model = REGISTRY["pa"](dim, variant=variant, C=C, epsilon=eps)
            model.w_ = w.copy()
            model.learn(x, y)
            steps[variant] = model.w_
            apas = REGISTRY["apas"](
                dim, variant=variant, C=C, side="none", feasible="none", D=1.0, epsilon=eps
            )
            apas.w_ = w.copy()
            w_hat = apas._step(x, y, eps, apas._sca).w_hat
            if compiled:
                np.testing.assert_allclose(model.w_, w_hat, rtol=1e-13, atol=1e-15)
            else:
                np.testing.assert_array_equal(w_hat, model.w_)
        r_pa = steps["pa"] @ x - y
        assert abs(r_pa - np.sign(e) * eps) <= 1e-12 * scale
        half_c = 1.0 / (2.0 * C)
        expected = eps + (a - eps) * half_c / (nx + half_c)
        r2 = abs(steps["pa2"] @ x - y)
        assert abs(r2 - expected) <= 1e-12 * scale
        assert eps < r2 < a
        r1 = abs(steps["pa1"] @ x - y)
        assert abs(r1 - max(eps, a - C * nx)) <= 1e-12 * scale


def test_step_size_formulas() -> None:
    assert pa_step_size(0.5, 0.6, 2.0, "pa", 1.0) == 0.0
    assert pa_step_size(1.0, 0.2, 2.0, "pa", 1.0) == pytest.approx(0.4)
    assert pa_step_size(1.0, 0.2, 2.0, "pa1", 0.1) == pytest.approx(0.1)
    assert pa_step_size(1.0, 0.2, 2.0, "pa2", 1.0) == pytest.approx(0.8 / 2.5)
    assert pa_step_size(1.0, 0.2, 0.0, "pa", 1.0) == 0.0


# ---- 12. classic PA reduction ------------------------------------------------------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dim", (2, 5, 100))
def test_registry_pa_is_classic_pa(variant: str, dim: int) -> None:
    X, y = stream(400, dim, seed=dim)
    eps, C = 0.05, 0.5
    model = REGISTRY["pa"](dim, variant=variant, C=C, epsilon=eps)
    for x, target in zip(X, y, strict=True):
        model.learn(x, float(target))
    np.testing.assert_allclose(model.weights, crammer_pa(X, y, eps, variant, C), rtol=0, atol=1e-14)


@pytest.mark.parametrize("compiled", (False, True))
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("dim", (2, 5, 100))
def test_apas_without_side_information_is_classic_pa(
    variant: str, dim: int, compiled: bool
) -> None:
    # bit for bit on the numpy path; to rounding when pa runs its compiled kernel
    if compiled and not _accel.available():
        pytest.skip("numba is not installed")
    _accel.use(compiled)
    try:
        _apas_is_classic_pa(variant, dim, compiled)
    finally:
        _accel.use(None)


def _apas_is_classic_pa(variant: str, dim: int, compiled: bool) -> None:
    X, y = stream(400, dim, seed=10 + dim)
    eps, C = 0.05, 0.5
    apas = REGISTRY["apas"](
        dim, variant=variant, C=C, side="none", feasible="none", nu=1e-3, D=1.0, epsilon=eps
    )
    pa = REGISTRY["pa"](dim, variant=variant, C=C, epsilon=eps)
    for x, target in zip(X, y, strict=True):
        ra = apas.learn(x, float(target))
        rp = pa.learn(x, float(target))
        assert apas.eps_ == eps and ra.diagnostics["epsilon"] == eps  # eps_t = eps_1
        if compiled:
            assert abs(ra.prediction - rp.prediction) <= 1e-12
            np.testing.assert_allclose(apas.weights, pa.weights, rtol=0, atol=1e-12)
        else:
            assert ra.prediction == rp.prediction
            np.testing.assert_array_equal(apas.weights, pa.weights)  # bit for bit
    np.testing.assert_allclose(apas.weights, crammer_pa(X, y, eps, variant, C), rtol=0, atol=1e-14)


# ---- 13. lazy projection and Lemma 7 -----------------------------------------------------
def tracking_stream(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = 5e-4 + 1e-2 * rng.normal(size=(n, dim))
    y = X @ rng.dirichlet(np.ones(dim)) + 1e-3 * rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("variant", ("pa", "pa2"))
@pytest.mark.parametrize("dim", (2, 5, 100))
def test_lazy_projection_pa_and_lemma_7(variant: str, dim: int) -> None:
    eps, C = 4e-4, 25.0
    X, y = tracking_stream(300, dim, seed=dim)
    model = REGISTRY["apas"](dim, variant=variant, C=C, side="none", adaptive=False, epsilon=eps)
    w = project_simplex(np.zeros(dim))
    w1 = w.copy()
    rng = np.random.default_rng(dim)
    us = rng.dirichlet(np.ones(dim), size=20)
    lhs = np.zeros(len(us))
    for x, target in zip(X, y, strict=True):
        a, nx = abs(w @ x - target), x @ x
        tau = pa_step_size(a, eps, nx, variant, C)
        expected = project_simplex(w - np.sign(w @ x - target) * tau * x)
        model.learn(x, float(target))
        np.testing.assert_array_equal(model.weights, expected)
        loss = max(0.0, a - eps)
        loss_u = np.maximum(0.0, np.abs(us @ x - target) - eps)
        lhs += tau * (2.0 * loss - tau * nx - 2.0 * loss_u)  # xi_t = tau_t (0 when passive)
        w = expected
    assert model.eps_ == eps
    assert np.all(lhs <= np.sum((w1 - us) ** 2, axis=1) + 1e-12)
