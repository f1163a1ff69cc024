"""Nested concave structure of the measures (``docs/algorithms/nemsis.md``).

A nested concave measure is ``Psi(zeta1(P, N), zeta2(P, N))``. NEMSIS needs, at a point
``rho = (r1, r2)`` of (TPR, TNR) space, the values ``z = zeta(rho)`` and the gradients
``alpha = grad zeta1(rho)``, ``beta = grad zeta2(rho)`` (the closed-form dual updates of
Algorithm 1, lines 15-16, by the paper's Lemma 7), and ``gamma = grad Psi(q)`` (line 17).

The inner functions are identified by short codes so the per-event loop stays scalar:

* ``"logpos"``: ``log(eps + p r1 + n(1 - r2))`` (NegKLD zeta1),
* ``"logneg"``: ``log(eps + n r2 + p(1 - r1))`` (NegKLD zeta2),
* ``"ba"``: ``(r1 + r2)/2``,
* ``"nss"``: ``1 - kappa^2 D^2`` with ``D = p(1 - r1) - n(1 - r2)``,
* ``"negkld"``: ``-KLD_eps(r1, r2)`` (the BAKLD / BKReward inner quantification term).

Outer functions: ``linear`` with weights ``(g1, g2)`` and ``q`` (Q_beta's harmonic form).
Everything is plain-float arithmetic (this runs once per event).
"""

from __future__ import annotations

import math

#: measure -> (zeta1 code, zeta2 code, Psi kind) for the NEMSIS measures (Table 1).
NESTED_MEASURES: dict[str, tuple[str, str, str]] = {
    "negkld": ("logpos", "logneg", "linear"),
    "q": ("ba", "nss", "q"),
    "bakld": ("ba", "negkld", "linear"),
}

#: SCAN measure -> (zeta1, zeta2) of its valuation V = BA + v zeta2 - const (§2.5).
VALUATION_INNER: dict[str, tuple[str, str]] = {
    "cqreward": ("ba", "nss"),
    "bkreward": ("ba", "negkld"),
}


def kappa_value(p: float, mode: str) -> float:
    """kappa of NSS: 1/max{p, n} (``"max"``) or 1 (``"paper_table"``), spec §8 item 3."""
    return 1.0 / max(p, 1.0 - p) if mode == "max" else 1.0


def zeta(code: str, r1: float, r2: float, p: float, eps: float, kappa: float) -> float:
    """Value of the inner function ``code`` at (r1, r2) = (TPR, TNR)."""
    n = 1.0 - p
    if code == "ba":
        return 0.5 * (r1 + r2)
    if code == "logpos":
        return math.log(eps + p * r1 + n * (1.0 - r2))
    if code == "logneg":
        return math.log(eps + n * r2 + p * (1.0 - r1))
    if code == "nss":
        d = p * (1.0 - r1) - n * (1.0 - r2)
        return 1.0 - kappa * kappa * d * d
    if code == "negkld":
        a = eps + p * r1 + n * (1.0 - r2)
        b = eps + n * r2 + p * (1.0 - r1)
        ps = (p + eps) / (1.0 + 2.0 * eps)
        ns = 1.0 - ps
        # -KLD_eps = p_s log a + n_s log b + H(p_s) - log(1 + 2 eps)   (§1.4 identity)
        h = -_xlogx(ps) - _xlogx(ns)
        return ps * math.log(a) + ns * math.log(b) + h - math.log(1.0 + 2.0 * eps)
    raise ValueError(f"unknown inner function {code!r}")


def zeta_grad(
    code: str, r1: float, r2: float, p: float, eps: float, kappa: float
) -> tuple[float, float]:
    """Gradient of ``code`` at (r1, r2): the closed-form dual of Lemma 7 (§1.4 columns)."""
    n = 1.0 - p
    if code == "ba":
        return 0.5, 0.5
    if code == "logpos":
        a = eps + p * r1 + n * (1.0 - r2)
        return p / a, -n / a
    if code == "logneg":
        b = eps + n * r2 + p * (1.0 - r1)
        return -p / b, n / b
    if code == "nss":
        d = p * (1.0 - r1) - n * (1.0 - r2)
        f = 2.0 * kappa * kappa * d
        return f * p, -f * n
    if code == "negkld":
        a = eps + p * r1 + n * (1.0 - r2)
        b = eps + n * r2 + p * (1.0 - r1)
        ps = (p + eps) / (1.0 + 2.0 * eps)
        ns = 1.0 - ps
        # [DERIVED] grad(-KLD_eps) = (p_s p/a - n_s p/b, -p_s n/a + n_s n/b)
        return ps * p / a - ns * p / b, -ps * n / a + ns * n / b
    raise ValueError(f"unknown inner function {code!r}")


def _xlogx(v: float) -> float:
    return v * math.log(v) if v > 0.0 else 0.0


def psi_q(x: float, y: float, beta: float) -> float:
    """Q_beta's outer function (1+b^2) x y / (b^2 x + y)."""
    b2 = beta * beta
    den = b2 * x + y
    return (1.0 + b2) * x * y / den if den > 0.0 else 0.0


def psi_q_grad(x: float, y: float, beta: float) -> tuple[float, float]:
    """grad Psi_Q = (1+b^2)(z^2, (1-z)^2/b^2), z = y/(b^2 x + y) (Table 1, gamma column)."""
    b2 = beta * beta
    z = y / (b2 * x + y)
    return (1.0 + b2) * z * z, (1.0 + b2) * (1.0 - z) ** 2 / b2


def linear_weights(measure: str, p: float, eps: float, C: float) -> tuple[float, float]:
    """gamma of a linear Psi: (p_s, n_s) for NegKLD, (C, 1-C) for BAKLD (§1.4)."""
    if measure == "negkld":
        ps = (p + eps) / (1.0 + 2.0 * eps)
        return ps, 1.0 - ps
    if measure == "bakld":
        return C, 1.0 - C
    raise ValueError(f"measure {measure!r} has no linear Psi")


def composite_weights(
    alpha: tuple[float, float], beta: tuple[float, float], gamma: tuple[float, float]
) -> tuple[float, float]:
    """Chain-rule weights (c+, c-) = (g1 a1 + g2 b1, g1 a2 + g2 b2) of the primal step (§2.3)."""
    return (
        gamma[0] * alpha[0] + gamma[1] * beta[0],
        gamma[0] * alpha[1] + gamma[1] * beta[1],
    )


# ---- explicit conjugates (for tests; §2.2) -----------------------------------------------
def log_affine_conjugate(lam: float, c: float) -> float:
    """f*(lam a) = 1 + log(lam) - lam c for f(r) = log(c + <a, r>), lam > 0 (§2.2)."""
    return 1.0 + math.log(lam) - lam * c


def nss_conjugate(lam: float, c: float, kappa: float) -> float:
    """f*(lam a) = -1 - lam c - lam^2/(4 kappa^2) for NSS(r) = 1 - kappa^2 (c + <a, r>)^2."""
    return -1.0 - lam * c - lam * lam / (4.0 * kappa * kappa)
