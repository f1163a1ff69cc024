"""Euclidean projections and proximal solvers behind APAS (paper App. C;
``docs/algorithms/apas.md``).

Pure numpy kernels, no state. Shapes: every vector is ``(N,)`` float64.

* projections onto the feasible set W: simplex (Prop. 5), l1 ball (Prop. 6), none (identity);
* Algorithm 2 (SCA) for a differentiable side function: ``sca_prox``;
* exact proxes for the non-smooth side functions of §3.2 / §7 item 12 (weighted l1,
  switching cost, group lasso) over each W, by closed form or by bisection on the
  multiplier of the constraint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

Vector = np.ndarray
Projection = Callable[[Vector], Vector]

FEASIBLE_SETS = ("simplex", "l1_ball", "none")
#: bisection steps on a constraint multiplier; 200 halvings exhaust float64 resolution.
_BISECT_MAX = 200


class ProxResult(NamedTuple):
    w: Vector
    iterations: int
    converged: bool


# ---- projections (§3.3) ------------------------------------------------------------------
def project_simplex(q: Vector) -> Vector:
    """Projection onto {w : 1.w = 1, w >= 0} (App. C.1, Prop. 5), sort based, O(N log N)."""
    u = np.sort(q)[::-1]
    css = np.cumsum(u)
    j = np.arange(1, q.size + 1)
    # rho* = max{j : q_[j] + (1 - S_j)/j > 0}; j = 1 always qualifies.
    r = int(np.flatnonzero(u + (1.0 - css) / j > 0.0)[-1]) + 1
    kappa = (1.0 - css[r - 1]) / r
    return np.maximum(q + kappa, 0.0)


def project_l1_ball(q: Vector, radius: float) -> Vector:
    """Projection onto {w : ||w||_1 <= radius} (App. C.2, Prop. 6), exact sort threshold.

    Prop. 6 omits the interior case ``||q||_1 <= radius``, where the answer is ``q`` (§7 item 9).
    """
    a = np.abs(q)
    if a.sum() <= radius:
        return q.copy()
    u = np.sort(a)[::-1]
    css = np.cumsum(u)
    j = np.arange(1, q.size + 1)
    r = int(np.flatnonzero(u - (css - radius) / j > 0.0)[-1]) + 1
    theta = (css[r - 1] - radius) / r
    return np.sign(q) * np.maximum(a - theta, 0.0)


def projection(feasible: str, radius: float = 1.0) -> Projection:
    """The Euclidean projection onto W named by ``feasible``."""
    if feasible == "simplex":
        return project_simplex
    if feasible == "l1_ball":
        return lambda q: project_l1_ball(q, radius)
    if feasible == "none":
        return lambda q: q.copy()
    raise ValueError(f"unknown feasible set {feasible!r}; expected one of {FEASIBLE_SETS}")


# ---- Algorithm 2: successive convex approximation -----------------------------------------
def gamma_schedule(gamma1: float, rho: float, n: int) -> Vector:
    """The first ``n`` SCA step sizes, gamma^{k+1} = gamma^k (1 - rho gamma^k) (§3.1)."""
    out = np.empty(n)
    g = gamma1
    for k in range(n):
        out[k] = g
        g *= 1.0 - rho * g
    return out


def sca_prox(
    w_hat: Vector,
    lam: float,
    grad: Callable[[Vector], Vector],
    proj: Projection,
    w_init: Vector,
    *,
    gamma1: float = 1.0,
    rho: float = 0.01,
    tol: float = 1e-10,
    max_iter: int = 100,
    on_iterate: Callable[[Vector], None] | None = None,
) -> ProxResult:
    """argmin_{w in W} h(w) + ||w - w_hat||^2 / (2 lam) by Algorithm 2.

    Each iteration solves the surrogate (11), w~ = Pi_W(w_hat - lam grad h(w^k)), and moves
    w^{k+1} = w^k + gamma^k (w~ - w^k). Stops when ||w~ - w^k||_inf <= tol (the fixed-point
    residual, §3.1) and returns w~; ``iterations`` counts projections. ``on_iterate`` sees
    every iterate w^k (tests check feasibility).
    """
    w = w_init.copy()
    gamma = gamma1
    for k in range(1, max_iter + 1):
        if on_iterate is not None:
            on_iterate(w)
        w_tilde = proj(w_hat - lam * grad(w))  # problem (11)
        if np.max(np.abs(w_tilde - w), initial=0.0) <= tol:
            return ProxResult(w_tilde, k, True)
        w = w + gamma * (w_tilde - w)  # Algorithm 2, line 5
        gamma *= 1.0 - rho * gamma
    return ProxResult(w, max_iter, False)


# ---- exact proxes for the non-smooth side functions (§7 item 12) --------------------------
def soft_threshold(v: Vector, kappa: Vector | float) -> Vector:
    return np.sign(v) * np.maximum(np.abs(v) - kappa, 0.0)


def group_norms(w: Vector, groups: np.ndarray, n_groups: int) -> Vector:
    """||w_{G_j}||_2 for groups labelled 0..n_groups-1."""
    return np.sqrt(np.bincount(groups, weights=w * w, minlength=n_groups))


def group_shrink(v: Vector, kappa: Vector, groups: np.ndarray) -> Vector:
    """Block soft threshold: prox of sum_j kappa_j ||w_{G_j}||_2 at v."""
    norms = group_norms(v, groups, kappa.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(norms > kappa, 1.0 - kappa / np.where(norms > 0, norms, 1.0), 0.0)
    return v * scale[groups]


def _bisect_decreasing(
    total: Callable[[float], float], target: float, lo: float, hi: float
) -> tuple[float, int]:
    """mu in [lo, hi] with total(mu) = target for a continuous non-increasing ``total``.

    Requires total(lo) >= target >= total(hi). Returns (mu, iterations).
    """
    it = 0
    while it < _BISECT_MAX:
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        it += 1
        if total(mid) > target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi), it


def _on_l1_ball(shrunk: Callable[[float], Vector], radius: float, hi: float) -> ProxResult:
    """Prox over the l1 ball via the multiplier theta >= 0 of ||w||_1 <= radius.

    ``shrunk(theta)`` is the unconstrained prox of h + theta ||.||_1, whose l1 norm does not
    increase with theta and is 0 at theta = ``hi``; theta = 0 when that prox is already
    inside the ball.
    """
    w0 = shrunk(0.0)
    norm0 = float(np.abs(w0).sum())
    if norm0 <= radius:
        return ProxResult(w0, 1, True)
    theta, it = _bisect_decreasing(lambda th: float(np.abs(shrunk(th)).sum()), radius, 0.0, hi)
    return ProxResult(shrunk(theta), it + 1, True)


def prox_weighted_l1(
    w_hat: Vector, lam: float, rho: Vector, feasible: str, radius: float
) -> ProxResult:
    """prox of lam * sum_i rho_i |w_i| over W, exact (§3.2, §7 item 12)."""
    if feasible == "simplex":
        # h is linear on the simplex (w >= 0), so the prox is one projection.
        return ProxResult(project_simplex(w_hat - lam * rho), 1, True)
    if feasible == "none":
        return ProxResult(soft_threshold(w_hat, lam * rho), 1, True)
    # KKT: w_i = sign(w_hat_i)(|w_hat_i| - lam rho_i - theta)_+ = Pi_ball(soft(w_hat, lam rho)).
    return ProxResult(project_l1_ball(soft_threshold(w_hat, lam * rho), radius), 1, True)


def _abs_pair_prox(b: Vector, a: Vector, kappa: float, theta: float) -> Vector:
    """Per coordinate argmin_w kappa |w - a| + theta |w| + (w - b)^2 / 2.

    The minimiser is a kink (0 or a) or a stationary point b - kappa s1 - theta s2 with
    s1, s2 in {-1, 1}; the objective is strictly convex, so the best candidate is exact.
    """
    cands = np.stack(
        [
            np.zeros_like(b),
            a,
            b - kappa - theta,
            b - kappa + theta,
            b + kappa - theta,
            b + kappa + theta,
        ]
    )
    obj = kappa * np.abs(cands - a) + theta * np.abs(cands) + 0.5 * (cands - b) ** 2
    return np.take_along_axis(cands, np.argmin(obj, axis=0)[None, :], axis=0)[0]


def prox_turnover(
    w_hat: Vector, lam: float, rho: float, anchor: Vector, feasible: str, radius: float
) -> ProxResult:
    """prox of lam * rho ||w - anchor||_1 over W, exact (§7 item 12)."""
    kappa = lam * rho
    if feasible == "none":
        return ProxResult(anchor + soft_threshold(w_hat - anchor, kappa), 1, True)
    if feasible == "l1_ball":
        hi = float(np.max(np.abs(w_hat))) + kappa  # 0 is optimal once theta >= |b| + kappa
        return _on_l1_ball(lambda th: _abs_pair_prox(w_hat, anchor, kappa, th), radius, hi)

    # simplex: multiplier mu of 1.w = 1; each coordinate is a 1-D convex problem on w >= 0,
    # so its solution is the unconstrained one clipped at 0.
    def w_of(mu: float) -> Vector:
        return np.maximum(anchor + soft_threshold(w_hat - mu - anchor, kappa), 0.0)

    lo = float(np.min(w_hat)) - kappa - 1.0  # every w_i >= 1 here
    hi = float(np.max(w_hat)) + kappa + float(np.max(np.abs(anchor)))  # every w_i = 0 here
    mu, it = _bisect_decreasing(lambda m: float(w_of(m).sum()), 1.0, lo, hi)
    # sum w(mu) is piecewise linear: one exact Newton step on the current piece.
    w = w_of(mu)
    free = (w > 0.0) & (np.abs(w_hat - mu - anchor) > kappa)
    if free.any():
        mu_exact = mu + (float(w.sum()) - 1.0) / int(free.sum())
        w_exact = w_of(mu_exact)
        if abs(w_exact.sum() - 1.0) <= abs(w.sum() - 1.0):
            w = w_exact
    return ProxResult(w, it + 1, True)


def prox_group_lasso(
    w_hat: Vector,
    lam: float,
    rho: Vector,
    groups: np.ndarray,
    feasible: str,
    radius: float,
) -> ProxResult:
    """prox of lam * sum_j rho_j ||w_{G_j}||_2 over W, exact.

    On the simplex the budget multiplier mu separates the groups, and the prox of a group
    norm plus w >= 0 at v is the block shrink of v_+. On the l1 ball the per-theta prox is
    the sparse-group-lasso one: block shrink of the soft threshold.
    """
    kappa = lam * rho
    if feasible == "none":
        return ProxResult(group_shrink(w_hat, kappa, groups), 1, True)
    if feasible == "l1_ball":
        hi = float(np.max(np.abs(w_hat)))  # soft threshold at max|w_hat| is 0
        return _on_l1_ball(
            lambda th: group_shrink(soft_threshold(w_hat, th), kappa, groups), radius, hi
        )

    def w_of(mu: float) -> Vector:
        return group_shrink(np.maximum(w_hat - mu, 0.0), kappa, groups)

    lo = float(np.min(w_hat)) - 1.0 - float(np.max(kappa, initial=0.0))
    hi = float(np.max(w_hat))
    mu, it = _bisect_decreasing(lambda m: float(w_of(m).sum()), 1.0, lo, hi)
    return ProxResult(w_of(mu), it + 1, True)
