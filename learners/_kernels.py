"""Compiled inner loops (numba) of the sequential learners: the O(d^2) discounted-VAW
stack (``vaw``, ``rls``, ``dvaw``, ``dvaw-ensemble``, ``dvaw-sa``), ``pa``, ``ogd`` and
AROW's full-covariance step (docs/design.md, "Compiled kernels").

Only :mod:`learners._accel` imports this module, and only when numba is installed and
the compiled path is on. Every kernel does the numpy code's arithmetic element by element
with the same IEEE operations (numba compiles without fast-math, so no contraction into
FMA and no reciprocal for a division); only the sums (P x, x.g, v.x, w.x, x.x, the
refresh's factorisation) add in a fixed order of their own instead of BLAS/LAPACK's.
AROW's step has no sum, so it gives the numpy code's bits.

``cache=True``: compiled code is stored next to this file, or under ``NUMBA_CACHE_DIR``
where the package directory is read-only (the Docker image), and loaded on later starts.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

jit = njit(cache=True, nogil=True)


@jit
def begin_one(P, v, x, gamma, g):  # type: ignore[no-untyped-def]
    """One expert: g = P x into ``g``; returns (q, c, rho, mu).

    P x is summed as sum_j x_j P[j, :], row by row (contiguous, vectorisable, a fixed
    order whatever the CPU): P is exactly symmetric (fresh, committed, refreshed)."""
    d = x.shape[0]
    for i in range(d):
        g[i] = 0.0
    for j in range(d):
        xj = x[j]
        row = P[j]
        for i in range(d):
            g[i] += xj * row[i]
    q = 0.0
    mu = 0.0
    for i in range(d):
        q += g[i] * x[i]
        mu += v[i] * x[i]
    c = gamma + q
    return q, c, q / c, mu


@jit
def commit_one(  # type: ignore[no-untyped-def]
    P, v, Sigma, theta, g, c, mu, x, y, gamma, unit, P2, v2, Sigma2, theta2, acc
):
    """One expert: dvaw.commit's P, v, Sigma, theta into the ``2`` arrays, the same
    operations per element; returns the guard of dvaw.unhealthy negated. ``acc``: d
    scratch."""
    d = x.shape[0]
    ci = 1.0 / c
    r = y - mu
    ok = c > 0.0 and c < math.inf
    for j in range(d):
        acc[j] = 0.0
    for i in range(d):
        vi = v[i] + (g[i] * ci) * r
        v2[i] = vi
        ok = ok and math.isfinite(vi)
        theta2[i] = gamma * theta[i] + y * x[i]
        gi, xi = g[i], x[i]
        src, dst, ssrc, sdst = P[i], P2[i], Sigma[i], Sigma2[i]
        # (p + p) * 0 is 0 unless p + p overflows or p is NaN: then acc turns NaN
        if unit:  # z / 1.0 == z and 1.0 * z == z: skipped, as dvaw.commit does
            for j in range(d):
                p = src[j] - (gi * g[j]) * ci
                dst[j] = p
                acc[j] += (p + p) * 0.0
            for j in range(d):
                sdst[j] = ssrc[j] + xi * x[j]
        else:
            for j in range(d):
                p = (src[j] - (gi * g[j]) * ci) / gamma
                dst[j] = p
                acc[j] += (p + p) * 0.0
            for j in range(d):
                sdst[j] = gamma * ssrc[j] + xi * x[j]
    big = False
    for j in range(d):
        big = big or acc[j] != 0.0
    if big:  # 0.5 (P + P^T), as dvaw.commit: only where p + p can overflow or is NaN
        for i in range(d):
            for j in range(i, d):
                a, b = P2[i, j], P2[j, i]
                P2[i, j] = 0.5 * (a + b)
                P2[j, i] = 0.5 * (b + a)
    for i in range(d):
        p = P2[i, i]
        ok = ok and p > 0.0 and p < math.inf
    return ok


@jit
def begin(P, v, x, gamma, g, q, c, rho, mu):  # type: ignore[no-untyped-def]
    """dvaw.begin for every expert, into (g, q, c, rho, mu)."""
    for k in range(v.shape[0]):
        q[k], c[k], rho[k], mu[k] = begin_one(P[k], v[k], x, gamma[k], g[k])


@jit
def commit(  # type: ignore[no-untyped-def]
    P,
    v,
    Sigma,
    theta,
    ridge,
    logdet,
    g,
    q,
    c,
    mu,
    x,
    y,
    gamma,
    log_gamma,
    P2,
    vt,
    Sigma2,
    rl,
    healthy,
):
    """dvaw.commit for every expert into P2, Sigma2, vt = (v, theta), rl = (ridge,
    logdet); ``healthy[k]``: the guard of dvaw.unhealthy negated."""
    n, d = v.shape
    unit = n == 1 and gamma[0] == 1.0
    acc = np.empty(d)
    for k in range(n):
        healthy[k] = commit_one(
            P[k],
            v[k],
            Sigma[k],
            theta[k],
            g[k],
            c[k],
            mu[k],
            x,
            y,
            gamma[k],
            unit,
            P2[k],
            vt[0, k],
            Sigma2[k],
            vt[1, k],
            acc,
        )
        rl[0, k] = ridge[k] * gamma[k]
        rl[1, k] = logdet[k] + d * log_gamma[k] + math.log1p(q[k] / gamma[k])


@jit
def step(  # type: ignore[no-untyped-def]
    P, v, Sigma, theta, ridge, logdet, x, y, gamma, log_gamma, P2, Sigma2, vt, sc
):
    """begin then commit for every expert, one call: sc = (ridge, logdet, q, c, rho,
    mu, healthy as 1.0 / 0.0) per expert, the new v and theta in vt."""
    n, d = v.shape
    unit = n == 1 and gamma[0] == 1.0
    g = np.empty(d)
    acc = np.empty(d)
    for k in range(n):
        q, c, rho, mu = begin_one(P[k], v[k], x, gamma[k], g)
        ok = commit_one(
            P[k],
            v[k],
            Sigma[k],
            theta[k],
            g,
            c,
            mu,
            x,
            y,
            gamma[k],
            unit,
            P2[k],
            vt[0, k],
            Sigma2[k],
            vt[1, k],
            acc,
        )
        sc[0, k] = ridge[k] * gamma[k]
        sc[1, k] = logdet[k] + d * log_gamma[k] + math.log1p(q / gamma[k])
        sc[2, k], sc[3, k], sc[4, k], sc[5, k] = q, c, rho, mu
        sc[6, k] = 1.0 if ok else 0.0


@jit
def refresh(Sigma, theta, P, v, logdet, idx, L, Li):  # type: ignore[no-untyped-def]
    """P = Sigma^{-1} by Cholesky (P = L^-T L^-1), v = P theta, logdet = 2 sum ln L_ii
    for experts ``idx``, written in place; False (nothing usable) if a Sigma is not
    positive definite (the caller then runs the numpy refresh and its eigen fallback).
    ``L``, ``Li``: d x d scratch."""
    d = Sigma.shape[1]
    for k in idx:
        # Cholesky Sigma = U^T U, right-looking on rows of U = L^T: every update is a
        # contiguous row operation (vectorisable), each element's sum in the order k = 0, 1..
        U = Li  # scratch, overwritten by L^-1 below
        for i in range(d):
            for j in range(i, d):
                U[i, j] = Sigma[k, i, j]
        for m in range(d):
            a = U[m, m]
            if not (a > 0.0 and a < math.inf):
                return False
            umm = math.sqrt(a)
            U[m, m] = umm
            for j in range(m + 1, d):
                U[m, j] = U[m, j] / umm
            for i in range(m + 1, d):
                umi = U[m, i]
                for j in range(i, d):
                    U[i, j] -= umi * U[m, j]
        for i in range(d):
            for j in range(i + 1):
                L[i, j] = U[j, i]
        # Li = L^-1 (lower triangular), row by row: Li[i] = (e_i - sum_m L[i,m] Li[m]) / L[i,i]
        for i in range(d):
            for j in range(d):
                Li[i, j] = 0.0
            Li[i, i] = 1.0
            for m in range(i):
                lim = L[i, m]
                for j in range(m + 1):
                    Li[i, j] -= lim * Li[m, j]
            lii = L[i, i]
            for j in range(i + 1):
                Li[i, j] = Li[i, j] / lii
        # P = Li^T Li, accumulated row by row of Li; exactly symmetric (mirrored)
        for i in range(d):
            for j in range(d):
                P[k, i, j] = 0.0
        for m in range(d):
            for i in range(m + 1):
                a = Li[m, i]
                for j in range(i, m + 1):
                    P[k, i, j] += a * Li[m, j]
        ld = 0.0
        for i in range(d):
            for j in range(i):
                P[k, i, j] = P[k, j, i]
            ld += math.log(L[i, i])
        logdet[k] = 2.0 * ld
        for i in range(d):
            s = 0.0
            for j in range(d):
                s += P[k, i, j] * theta[k, j]
            v[k, i] = s
    return True


# ---- passive-aggressive regression (learners/pa.py) -----------------------------------
#: variant codes of pa_step / pa_many
PA, PA1, PA2 = 0, 1, 2


@jit
def dot(a, b):  # type: ignore[no-untyped-def]
    """a.b summed in index order (the compiled path's w.x, in learn, learn_many, predict)."""
    s = 0.0
    for i in range(a.shape[0]):
        s += a[i] * b[i]
    return s


@jit
def dot_rows(X, w, out):  # type: ignore[no-untyped-def]
    """out[r] = dot(w, X[r]) for every row: the same products, summed in the same index
    order as ``dot`` (a linear learner's ``predict_many``, one call for the batch)."""
    for r in range(X.shape[0]):
        s = 0.0
        for i in range(w.shape[0]):
            s += w[i] * X[r, i]
        out[r] = s
    return True


@jit
def pa_step(w, x, y, eps, variant, C, w2):  # type: ignore[no-untyped-def]
    """PARegressor.learn's step: -> (y_hat, e, excess, tau, x.x); when tau > 0 the new w
    is in ``w2`` (``w`` is never written). The same float operations as pa.py, in its
    order; x.x is returned so that a non-finite one sends the caller to the validation."""
    y_hat = dot(w, x)
    sq = dot(x, x)
    e = y_hat - y
    excess = abs(e) - eps
    tau = 0.0
    if excess <= 0.0:
        tau = 0.0
    elif variant == PA2:
        tau = excess / (sq + 1.0 / (2.0 * C))
    elif sq <= 0.0:
        tau = 0.0
    else:
        tau = excess / sq
        if variant == PA1:
            tau = tau if tau < C else C  # Python's min(C, tau), NaN included
    if tau > 0.0:
        s = tau if e > 0.0 else -tau
        for i in range(x.shape[0]):
            w2[i] = w[i] - s * x[i]
    return y_hat, e, excess, tau, sq


@jit
def pa_many(w, X, y, eps, variant, C, w2, out):  # type: ignore[no-untyped-def]
    """pa_step on each row in order; ``out[i]`` = (y_hat, e, excess, tau) of row i, the
    final w in ``w2`` (a copy of ``w`` when nothing updated)."""
    d = w.shape[0]
    cur = w.copy()
    nxt = np.empty(d)
    for r in range(X.shape[0]):
        y_hat, e, excess, tau, _ = pa_step(cur, X[r], y[r], eps, variant, C, nxt)
        out[r, 0], out[r, 1], out[r, 2], out[r, 3] = y_hat, e, excess, tau
        if tau > 0.0:
            cur, nxt = nxt, cur
    for i in range(d):
        w2[i] = cur[i]


# ---- running sums of rank-1 updates (service/metrics/regret.py) ------------------------------
@jit
def outer_sums(A, b, X, y):  # type: ignore[no-untyped-def]
    """``A += x x^T`` and ``b += y x`` for each row of ``X`` in order, in place: every entry
    gets the same products added in the same order as a loop of rank-1 updates."""
    d = X.shape[1]
    for r in range(X.shape[0]):
        yr = y[r]
        for i in range(d):
            xi = X[r, i]
            for j in range(d):
                A[i, j] = A[i, j] + xi * X[r, j]
            b[i] = b[i] + yr * xi


# ---- online gradient descent (learners/ogd.py) -----------------------------------------
@jit
def ogd_many(w, X, y, lr, sqrt_schedule, t0, w2, out):  # type: ignore[no-untyped-def]
    """OGD._learn on each row in order from round ``t0``: out[i] = (y_hat, eta), the final
    w in ``w2``; w <- w + (eta (y - y_hat)) x, the same float operations as ogd.py."""
    d = w.shape[0]
    for i in range(d):
        w2[i] = w[i]
    for r in range(X.shape[0]):
        x = X[r]
        y_hat = dot(w2, x)
        eta = lr / math.sqrt(t0 + r + 1) if sqrt_schedule else lr
        s = eta * (y[r] - y_hat)
        for i in range(d):
            w2[i] = w2[i] + s * x[i]
        out[r, 0], out[r, 1] = y_hat, eta


# ---- AROW (learners/arow.py) ---------------------------------------------------------
@jit
def arow_shrink(cov, sx, beta, out):  # type: ignore[no-untyped-def]
    """out = cov - beta (sx sx'), element by element as numpy's cov - beta * outer(sx, sx):
    the same bits, one pass instead of three."""
    d = sx.shape[0]
    for i in range(d):
        si = sx[i]
        src, dst = cov[i], out[i]
        for j in range(d):
            dst[j] = src[j] - beta * (si * sx[j])


@jit
def ogd_step(w, x, y, eta_lr, sqrt_schedule, t, w2):  # type: ignore[no-untyped-def]
    """One OGD._learn at round ``t`` (after the increment) -> (y_hat, eta); the new w in
    ``w2``. The same operations as ogd_many's row."""
    y_hat = dot(w, x)
    eta = eta_lr / math.sqrt(t) if sqrt_schedule else eta_lr
    s = eta * (y - y_hat)
    for i in range(w.shape[0]):
        w2[i] = w[i] + s * x[i]
    return y_hat, eta
