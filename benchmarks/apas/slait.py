"""SLAIT-ETE / SLAIT-DR baselines (Benidis, Feng, Palomar, IEEE TSP 2018).

A numpy port of the majorization-minimization solver of the R package ``sparseIndexTracking``
(``spIndexTrack``, GPL-3; algorithm re-implemented from its description, not copied):

    min_w  TE(w) + lam * sum_i log(1 + w_i/p) / log(1 + u/p)   s.t.  1.w = 1, 0 <= w <= u

with ETE(w) = ||r - X w||^2 / m or DR(w) = ||(r - X w)^+||^2 / m. Each MM step linearises the
log at w^k, majorises the quadratic by its largest eigenvalue and projects onto the capped
simplex; p falls geometrically from 1e-1 to 1e-7 over 11 stages; each stage uses an
extrapolated double step with backtracking and stops on a relative objective change below
min(p/10, 1e-3). Weights below 1e-9 are zeroed and the rest renormalised.

``rolling`` holds the fitted weights between refits (spec §7 item 17) and charges no costs.
"""

from __future__ import annotations

import numpy as np

MAX_ITER = 1000


def project_capped_simplex(v: np.ndarray, u: float) -> np.ndarray:
    """argmin ||w - v|| s.t. 1.w = 1, 0 <= w <= u (u >= 1/N): w = clip(v - mu, 0, u).

    sum clip(v - mu, 0, u) is piecewise linear and non-increasing in mu with breakpoints
    v_i and v_i - u; find the piece that crosses 1 and solve on it exactly.
    """
    n = v.size
    vs = np.sort(v)
    csum = np.concatenate([[0.0], np.cumsum(vs)])
    bp = np.sort(np.concatenate([v, v - u]))
    capped = np.searchsorted(vs, bp + u, side="left")  # v_i >= b + u sit at u
    inside = np.searchsorted(vs, bp, side="right")  # b < v_i < b + u are linear
    total = u * (n - capped) + (csum[capped] - csum[inside]) - bp * (capped - inside)
    j = int(np.flatnonzero(total >= 1.0)[-1])
    if j + 1 == bp.size or total[j] == total[j + 1]:
        mu = bp[j]
    else:
        mu = bp[j] + (total[j] - 1.0) / (total[j] - total[j + 1]) * (bp[j + 1] - bp[j])
    return np.clip(v - mu, 0.0, u)


def fit(
    X: np.ndarray, r: np.ndarray, lam: float, u: float = 0.5, measure: str = "ete"
) -> np.ndarray:
    """Sparse index-tracking weights on a window (m days x n assets) of returns."""
    m, n = X.shape
    A = X.T @ X / m
    L = float(np.linalg.eigvalsh(A)[-1])
    Xr = X.T @ r / m
    pp = 10.0 ** (-(7.0 ** (np.arange(11) / 10.0)))  # p = 1e-1 ... 1e-7
    w0 = np.full(n, 1.0 / n)

    def objective(w: np.ndarray, c1: float, p: float) -> float:
        res = r - X @ w
        if measure == "dr":
            res = np.maximum(res, 0.0)
        return float(res @ res) / lam + m / c1 * float(np.sum(np.log1p(w / p)))

    def mm_step(w: np.ndarray, c1: float, p: float) -> np.ndarray:
        d = lam / ((p + np.abs(w)) * c1)  # gradient of the linearised log penalty
        target = Xr
        if measure == "dr":  # (z^+)^2 <= (z - min(z_k, 0))^2: DR becomes ETE on a shifted r
            target = X.T @ (r - np.minimum(r - X @ w, 0.0)) / m
        grad = 2.0 * (A @ w - target) + d
        return project_capped_simplex(w - grad / (2.0 * L), u)

    k = 0
    w = w0
    for p in pp:
        c1 = float(np.log1p(u / p))
        prev = None
        while True:
            k += 1
            w1 = mm_step(w0, c1, p)
            w2 = mm_step(w1, c1, p)
            R = w1 - w0
            U = w2 - w1 - R
            nu = float(np.linalg.norm(U))
            a = max(min(-float(np.linalg.norm(R)) / nu, -1.0), -300.0) if nu > 0 else -1.0
            while True:  # extrapolation with backtracking (SQUAREM-like)
                if abs(a + 1.0) < 1e-6:
                    w = w2
                    f = objective(w, c1, p)
                    break
                w = project_capped_simplex(w0 - 2.0 * a * R + a * a * U, u)
                f = objective(w, c1, p)
                if prev is not None and f * (1.0 - np.sign(f) * 1e-9) >= prev:
                    a = (a - 1.0) / 2.0
                else:
                    break
            w0 = w
            if prev is not None:
                if abs(f - prev) / max(1.0, abs(prev)) <= min(p / 10.0, 1e-3) or k >= MAX_ITER:
                    break
            prev = f
    w = np.where(w < 1e-9, 0.0, w)
    return w / w.sum()


def rolling(
    X: np.ndarray,
    y: np.ndarray,
    test_from: int,
    window: int,
    every: int,
    lam: float,
    u: float = 0.5,
    measure: str = "ete",
) -> tuple[np.ndarray, np.ndarray]:
    """Portfolio returns on days test_from.. and the cardinality of each fit.

    Refit on the ``window`` days before day t every ``every`` days; hold weights in between.
    """
    y_hat = np.empty(len(y) - test_from)
    cards = []
    w = None
    for i, t in enumerate(range(test_from, len(y))):
        if i % every == 0:
            lo = max(0, t - window)
            w = fit(X[lo:t], y[lo:t], lam, u, measure)
            cards.append(int(np.count_nonzero(w > 1e-6)))
        y_hat[i] = float(X[t] @ w)
    return y_hat, np.asarray(cards)
