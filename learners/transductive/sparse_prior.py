"""Sparse transductive prior for the squared loss (docs/algorithms/transductive.md, Algorithm B).

The prior is a product of Student-t(3) densities scaled by the inverse norm of each design
column, pi(theta) = prod_j c_j (tau_j^2 + theta_j^2)^-2, tau_j = tau / |X_j| (eq. 7, §4.1).
Exponential weights with eta = 1/(2Y^2) plus Vovk's substitution give the predictor (8),
which has no closed form: §4.4 lists three routes. This module implements

* :func:`gibbs_predict`, the recommended Rao-Blackwellised data-augmentation Gibbs sampler
  (§4.4 "Recommended implementation [X]"), used by the ``transductive`` learner in
  ``mode="sparse"``.

Routes 3 and 2 of §4.4 (Laplace, importance sampling), kept for comparisons, are offline
references: :mod:`learners.transductive.offline.sparse_approximations`.

The posterior is not log-concave (§4.2): no polynomial-time guarantee is claimed.
"""

from __future__ import annotations

import numpy as np

#: Student-t degrees of freedom of the prior (eq. 7): theta_j = tau_j t_3 / sqrt(3).
NU = 3.0


def column_scales(X: np.ndarray, tau: float) -> np.ndarray:
    """tau_j = tau / |X_j| (eq. 7); zero columns get tau_j = 1 (they never matter, §4.1)."""
    norms = np.sqrt(np.einsum("ij,ij->j", X, X))
    out = np.ones(X.shape[1])
    nz = norms > 0
    out[nz] = tau / norms[nz]
    return out


def sample_prior(tau_j: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws of the prior as the Gaussian scale mixture the sampler uses:
    omega_j ~ InvGamma(3/2, 3/2), theta_j | omega_j ~ N(0, omega_j tau_j^2 / 3)."""
    d = tau_j.shape[0]
    omega = 1.0 / rng.gamma(NU / 2, 2.0 / NU, size=(n, d))
    return rng.normal(size=(n, d)) * np.sqrt(omega * tau_j**2 / NU)


def _logmeanexp(a: np.ndarray) -> float:
    m = float(np.max(a))
    return m + float(np.log(np.mean(np.exp(a - m))))


def gibbs_predict(
    x: np.ndarray,
    G: np.ndarray,
    b: np.ndarray,
    tau_j: np.ndarray,
    omega: np.ndarray,
    rng: np.random.Generator,
    *,
    Y: float,
    burn_in: int = 10,
    sweeps: int = 50,
    freeze: bool = False,
) -> tuple[float, np.ndarray, float]:
    """Predictor (8) by Rao-Blackwellised Gibbs on nu_t (spec §4.4).

    ``G`` is G_t (it INCLUDES x_t x_t^T), ``b`` is b_{t-1}. Starting from ``omega`` (warm
    start), each sweep: given omega, f = theta.x is N(mu_f, s_f^2) and
    E[e^{+-f/Y} | omega] = exp(+-mu_f/Y + s_f^2/(2Y^2)) in closed form (recorded after the
    burn-in); then theta | omega ~ N(m, V), V = (2 eta G + diag(3/(omega tau^2)))^-1,
    m = V 2 eta b, and omega_j | theta ~ InvGamma(2, (3/2)(1 + theta_j^2/tau_j^2)).
    y = (Y/2)[LSE(a+) - LSE(a-)]. ``freeze`` keeps omega fixed (Gaussian prior: test 8).

    Returns the raw prediction, the last omega, and the Monte Carlo standard error of the
    prediction by batch means (min(5, sweeps) batches; spec §13.5).
    """
    eta = 1.0 / (2.0 * Y * Y)
    P0 = 2.0 * eta * G
    c = 2.0 * eta * b
    scale2 = tau_j**2 / NU
    omega = omega.copy()
    a_plus = np.empty(sweeps)
    a_minus = np.empty(sweeps)
    d = x.shape[0]
    for k in range(burn_in + sweeps):
        P = P0 + np.diag(1.0 / (omega * scale2))
        L = np.linalg.cholesky(P)
        xi = rng.normal(size=d) if not freeze else np.zeros(d)
        # one solve gives m = P^-1 c, P^-1 x and P^-1 L xi = L^-T xi (P^-1 = L^-T L^-1)
        sol = np.linalg.solve(P, np.column_stack([c, x, L @ xi]))
        m = sol[:, 0]
        if k >= burn_in:
            mu_f, s2_f = float(x @ m), float(x @ sol[:, 1])
            a_plus[k - burn_in] = mu_f / Y + s2_f / (2 * Y * Y)
            a_minus[k - burn_in] = -mu_f / Y + s2_f / (2 * Y * Y)
        if freeze:
            continue
        theta = m + sol[:, 2]
        rate = (NU / 2) * (1.0 + theta**2 / tau_j**2)
        omega = rate / rng.gamma(2.0, 1.0, size=d)  # InvGamma(2, rate)
    y_hat = (Y / 2) * (_logmeanexp(a_plus) - _logmeanexp(a_minus))
    nb = min(5, sweeps)
    if nb > 1:
        parts = [
            (Y / 2) * (_logmeanexp(p) - _logmeanexp(q))
            for p, q in zip(np.array_split(a_plus, nb), np.array_split(a_minus, nb), strict=True)
        ]
        stderr = float(np.std(parts, ddof=1) / np.sqrt(nb))
    else:
        stderr = float("nan")
    return y_hat, omega, stderr
