"""Laplace and importance-sampling approximations of the sparse predictor (offline only).

Routes 3 and 2 of §4.4 for the predictor (8) of the sparse Student-t transductive prior
(docs/algorithms/transductive.md, Algorithm B), kept to compare with the Gibbs sampler the
``transductive`` learner uses (:func:`learners.transductive.sparse_prior.gibbs_predict`).
Both need G_t invertible. No registered learner uses them, so the service never imports them.
"""

from __future__ import annotations

import numpy as np

from learners.transductive.sparse_prior import _logmeanexp


def log_prior(theta: np.ndarray, tau_j: np.ndarray) -> np.ndarray:
    """log pi(theta) up to a constant (eq. 7); ``theta`` may be (n, d)."""
    return -2.0 * np.sum(np.log(tau_j**2 + theta**2), axis=-1)


def laplace_predict(
    x: np.ndarray, G: np.ndarray, b: np.ndarray, tau_j: np.ndarray, Y: float
) -> float:
    """Route 3 of §4.4: x^T G^-1 b + (Y/2)[log pi(theta+) - log pi(theta-)],
    theta+- = G_t^-1 (b_{t-1} +- Y x_t). Needs G_t invertible."""
    base = np.linalg.solve(G, b)
    gx = np.linalg.solve(G, x)
    lp = log_prior(np.stack([base + Y * gx, base - Y * gx]), tau_j)
    return float(x @ base) + (Y / 2) * float(lp[0] - lp[1])


def importance_predict(
    x: np.ndarray,
    G: np.ndarray,
    b: np.ndarray,
    tau_j: np.ndarray,
    Y: float,
    rng: np.random.Generator,
    n: int = 4000,
) -> float:
    """Route 2 of §4.4: Gaussian importance sampling with common random numbers,
    y = x^T G^-1 b + (Y/2)[log E_{N+} pi - log E_{N-} pi], N+- = N(m+-, (2 eta G_t)^-1)."""
    eta = 1.0 / (2.0 * Y * Y)
    base = np.linalg.solve(G, b)
    gx = np.linalg.solve(G, x)
    L = np.linalg.cholesky(np.linalg.inv(2.0 * eta * G))
    noise = rng.normal(size=(n, x.shape[0])) @ L.T
    lp_plus = log_prior(base + Y * gx + noise, tau_j)
    lp_minus = log_prior(base - Y * gx + noise, tau_j)
    return float(x @ base) + (Y / 2) * (_logmeanexp(lp_plus) - _logmeanexp(lp_minus))
