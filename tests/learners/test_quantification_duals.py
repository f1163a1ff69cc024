"""docs/algorithms/nemsis.md: gradients, conjugates and duals of the nested measures."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from learners.quantification import nested

RTOL = 1e-9
FD_TOL = 1e-5
H = 1e-6
INNER = ("logpos", "logneg", "ba", "nss", "negkld")


def _fd(f, x: float, y: float) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    return (
        (f(x + H, y) - f(x - H, y)) / (2 * H),
        (f(x, y + H) - f(x, y - H)) / (2 * H),
    )


@pytest.mark.parametrize("code", INNER)
def test_zeta_gradients_match_finite_differences(code: str) -> None:
    rng = np.random.default_rng(0)
    for _ in range(100):
        r1, r2 = rng.random(2)
        p = float(rng.uniform(0.05, 0.95))
        eps = 0.005  # 1/(2|S|) for |S| = 100 keeps the logs away from 0
        k = nested.kappa_value(p, "max")
        got = nested.zeta_grad(code, r1, r2, p, eps, k)
        want = _fd(lambda a, b, p=p, k=k: nested.zeta(code, a, b, p, 0.005, k), r1, r2)
        assert got == pytest.approx(want, rel=FD_TOL, abs=FD_TOL)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_psi_q_gradient_matches_finite_differences(beta: float) -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        x, y = rng.uniform(0.05, 1.0, 2)
        got = nested.psi_q_grad(x, y, beta)
        want = _fd(lambda a, b: nested.psi_q(a, b, beta), x, y)
        assert got == pytest.approx(want, rel=FD_TOL, abs=FD_TOL)


def _log_affine(code: str, p: float, eps: float) -> tuple[np.ndarray, float]:
    """``zeta = log(c + <a, r>)``: a1 = (p, -n), c1 = eps + n; a2 = (-p, n), c2 = eps + p."""
    n = 1 - p
    if code == "logpos":
        return np.array([p, -n]), eps + n
    return np.array([-p, n]), eps + p


@pytest.mark.parametrize("code", ["logpos", "logneg"])
def test_fenchel_young_log_affine(code: str) -> None:
    rng = np.random.default_rng(2)
    for _ in range(50):
        r = rng.uniform(0.05, 0.95, 2)
        p, eps = float(rng.uniform(0.05, 0.95)), float(rng.choice([0.0, 1e-3]))
        a, c = _log_affine(code, p, eps)
        g = np.array(nested.zeta_grad(code, r[0], r[1], p, eps, 1.0))
        lam = g[0] / a[0]
        assert g == pytest.approx(lam * a, rel=RTOL)
        fy = float(g @ r) - nested.zeta(code, r[0], r[1], p, eps, 1.0)
        assert nested.log_affine_conjugate(lam, c) == pytest.approx(fy, rel=RTOL, abs=1e-12)
        # inf_x lam <a, x> - log(c + <a, x>) depends on x only through u = <a, x>
        res = minimize_scalar(
            lambda u, lam=lam, c=c: lam * u - math.log(c + u),
            bounds=(-c + 1e-9, 50.0),
            method="bounded",
            options={"xatol": 1e-10},
        )
        assert res.fun == pytest.approx(fy, abs=1e-6)


def test_fenchel_young_nss() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        r = rng.uniform(0.0, 1.0, 2)
        p = float(rng.uniform(0.05, 0.95))
        k = nested.kappa_value(p, "max")
        a, c = np.array([-p, 1 - p]), p - (1 - p)
        g = np.array(nested.zeta_grad("nss", r[0], r[1], p, 0.0, k))
        d = c + float(a @ r)
        lam = -2 * k * k * d
        assert g == pytest.approx(lam * a, rel=RTOL, abs=1e-15)
        fy = float(g @ r) - nested.zeta("nss", r[0], r[1], p, 0.0, k)
        assert nested.nss_conjugate(lam, c, k) == pytest.approx(fy, rel=RTOL, abs=1e-12)
        res = minimize_scalar(
            lambda u, lam=lam, c=c, k=k: lam * u - (1 - k * k * (c + u) ** 2),
            bounds=(-5.0, 5.0),
            method="bounded",
            options={"xatol": 1e-10},
        )
        assert res.fun == pytest.approx(fy, abs=1e-6)


def test_conjugate_golden_values() -> None:
    p, r1, r2 = 0.3, 0.6, 0.8
    g = nested.zeta_grad("logpos", r1, r2, p, 0.0, 1.0)
    lam = g[0] / p
    assert abs(lam - 3.125) <= 1e-6
    conj = nested.log_affine_conjugate(lam, 0.7)
    assert abs(conj - (-0.0480657)) <= 1e-6
    assert conj == pytest.approx(
        g[0] * r1 + g[1] * r2 - nested.zeta("logpos", r1, r2, p, 0.0, 1.0), rel=RTOL
    )
    k = 1 / 0.7
    g = nested.zeta_grad("nss", r1, r2, p, 0.0, k)
    lam = g[1] / 0.7
    assert abs(lam - 0.0816327) <= 1e-6
    assert abs(nested.nss_conjugate(lam, -0.4, k) - (-0.9681633)) <= 1e-6
    assert abs(nested.zeta("nss", r1, r2, p, 0.0, k) - 0.9991837) <= 1e-6
    assert nested.zeta_grad("nss", r1, r2, p, 0.0, k) == pytest.approx(
        (-0.0244898, 0.0571429), abs=1e-6
    )
    assert nested.psi_q_grad(0.8, 0.9, 1.0) == pytest.approx((0.5605536, 0.4429066), abs=1e-6)


# ---- §7.2.3 feasibility ------------------------------------------------------------------
def test_dual_feasibility() -> None:
    rng = np.random.default_rng(4)
    for _ in range(200):
        r1, r2 = rng.random(2)
        p, eps = float(rng.uniform(0.05, 0.95)), 1e-3
        n = 1 - p
        a = nested.zeta_grad("logpos", r1, r2, p, eps, 1.0)
        assert a[0] > 0 > a[1]
        assert a[0] / a[1] == pytest.approx(-p / n, rel=RTOL)
        b = nested.zeta_grad("logneg", r1, r2, p, eps, 1.0)
        assert b[1] > 0 > b[0]
        assert b[0] / b[1] == pytest.approx(-p / n, rel=RTOL)
        assert nested.zeta_grad("ba", r1, r2, p, eps, 1.0) == (0.5, 0.5)
        assert nested.linear_weights("bakld", p, eps, 0.3) == (0.3, 0.7)
        ps = (p + eps) / (1 + 2 * eps)
        assert nested.linear_weights("negkld", p, eps, 0.3) == pytest.approx((ps, 1 - ps))
    for beta in (0.5, 1.0, 2.0):
        for _ in range(100):
            q = rng.uniform(1e-3, 1.0, 2)
            g = nested.psi_q_grad(q[0], q[1], beta)
            assert min(g) >= 0.0
            assert math.sqrt(g[0]) + beta * math.sqrt(g[1]) == pytest.approx(
                math.sqrt(1 + beta**2), rel=RTOL
            )
            assert g[0] * q[0] + g[1] * q[1] == pytest.approx(
                nested.psi_q(q[0], q[1], beta), rel=RTOL
            )


# ---- §7.2.4 golden NEMSIS weights and sign rule ------------------------------------------
def _negkld_weights(r1: float, r2: float, p: float, eps: float) -> tuple[float, float]:
    a = nested.zeta_grad("logpos", r1, r2, p, eps, 1.0)
    b = nested.zeta_grad("logneg", r1, r2, p, eps, 1.0)
    return nested.composite_weights(a, b, nested.linear_weights("negkld", p, eps, 0.0))


def test_golden_nemsis_weights() -> None:
    assert nested.zeta_grad("logpos", 0.6, 0.8, 0.3, 0.0, 1.0) == pytest.approx(
        (0.9375, -2.1875), abs=1e-7
    )
    assert nested.zeta_grad("logneg", 0.6, 0.8, 0.3, 0.0, 1.0) == pytest.approx(
        (-0.4411765, 1.0294118), abs=1e-7
    )
    assert (
        nested.zeta("logpos", 0.6, 0.8, 0.3, 0.0, 1.0),
        nested.zeta("logneg", 0.6, 0.8, 0.3, 0.0, 1.0),
    ) == pytest.approx((-1.1394343, -0.3856625), abs=1e-7)
    cp, cn = _negkld_weights(0.6, 0.8, 0.3, 0.0)
    assert abs(cp - (-0.0275735)) <= 1e-7 and abs(cn - 0.0643382) <= 1e-7


def test_weights_vanish_at_the_right_prevalence_and_follow_the_sign_rule() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        p = float(rng.uniform(0.05, 0.95))
        eps = float(rng.choice([0.0, 1e-3]))
        n = 1 - p
        # p r1 + n (1 - r2) == p  <=>  r2 = 1 - p (1 - r1) / n
        r1 = float(rng.uniform(max(0.0, 1 - n / p), 1.0)) if p > n else float(rng.random())
        r2 = 1 - p * (1 - r1) / n
        cp, cn = _negkld_weights(r1, r2, p, eps)
        assert abs(cp) <= 1e-12 and abs(cn) <= 1e-12
        r1, r2 = rng.random(2)
        cp, cn = _negkld_weights(r1, r2, p, eps)
        p_hat = p * r1 + n * (1 - r2)
        if p_hat > p + 1e-9:
            assert cp < 0 < cn
        elif p_hat < p - 1e-9:
            assert cn < 0 < cp


# ---- §7.2.5 concavity and §7.2.6 identity ------------------------------------------------
@pytest.mark.parametrize("code", INNER)
def test_inner_functions_are_concave(code: str) -> None:
    rng = np.random.default_rng(6)
    for _ in range(300):
        a, b = rng.random(2), rng.random(2)
        p, eps = float(rng.uniform(0.05, 0.95)), 1e-3
        k = nested.kappa_value(p, "max")
        f = lambda r, p=p, eps=eps, k=k: nested.zeta(code, r[0], r[1], p, eps, k)  # noqa: E731
        assert f((a + b) / 2) >= (f(a) + f(b)) / 2 - 1e-12


def test_psi_q_is_concave() -> None:
    rng = np.random.default_rng(7)
    for beta in (0.5, 1.0, 2.0):
        for _ in range(300):
            a, b = rng.uniform(1e-6, 1.0, 2), rng.uniform(1e-6, 1.0, 2)
            m = (a + b) / 2
            lhs = nested.psi_q(m[0], m[1], beta)
            rhs = (nested.psi_q(a[0], a[1], beta) + nested.psi_q(b[0], b[1], beta)) / 2
            assert lhs >= rhs - 1e-12


def test_bakld_zeta2_gradient_equals_negkld_weights() -> None:
    rng = np.random.default_rng(8)
    for _ in range(200):
        r1, r2 = rng.random(2)
        p, eps = float(rng.uniform(0.05, 0.95)), float(rng.choice([0.0, 1e-3, 0.01]))
        if eps == 0.0:
            r1, r2 = 0.05 + 0.9 * r1, 0.05 + 0.9 * r2
        got = nested.zeta_grad("negkld", r1, r2, p, eps, 1.0)
        assert got == pytest.approx(_negkld_weights(r1, r2, p, eps), rel=RTOL, abs=1e-12)
