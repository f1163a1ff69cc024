"""Compiled inner loops (numba) of the sequential learners: the O(d^2) discounted-VAW
stack (``vaw``, ``rls``, ``dvaw``, ``dvaw-ensemble``, ``dvaw-sa``), ``pa``, ``ogd``,
AROW's full-covariance and diagonal steps and the quantifiers' NEMSIS step
(docs/design.md, "Compiled kernels").

Only :mod:`learners._accel` imports this module, and only when numba is installed and
the compiled path is on. Every kernel does the numpy code's arithmetic element by element
with the same IEEE operations (numba compiles without fast-math, so no contraction into
FMA and no reciprocal for a division); only the sums (P x, x.g, v.x, w.x, x.x, the
refresh's factorisation) add in a fixed order of their own instead of BLAS/LAPACK's.
AROW's full and "prec" shrinks have no sum, so they give the numpy code's bits; its
diagonal forms (mu.x, x' Sigma x, the trace, the "cov" others' share) and the quantifiers'
NEMSIS step (w.x, w.w) sum in index order.

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
    recip = 1.0 / gamma
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
            for j in range(d):  # times 1/gamma, as dvaw.discount
                p = (src[j] - (gi * g[j]) * ci) * recip
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
        # Cholesky Sigma = U^T U by rows of U = L^T: row i is Sigma's row less
        # U[m, i] U[m, :] for m = 0, 1, .. i-1 in that order, then divided by its root.
        # Every update is a contiguous row operation on slices that start at 0 (an index
        # numba cannot prove non-negative keeps LLVM from vectorising the loop).
        U = Li  # scratch, overwritten by L^-1 below
        for i in range(d):
            row = U[i, i:]
            src = Sigma[k, i, i:]
            n = row.shape[0]
            for j in range(n):
                row[j] = src[j]
            for m in range(i):
                um = U[m, i:]
                umi = um[0]
                for j in range(n):
                    row[j] -= umi * um[j]
            a = row[0]
            if not (a > 0.0 and a < math.inf):
                return False
            uii = math.sqrt(a)
            row[0] = uii
            for j in range(1, n):
                row[j] = row[j] / uii
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
        # P = Li^T Li: P[i, j] (j >= i) sums Li[m, i] Li[m, j] over m = i, i+1, .. in
        # that order, one row of P at a time (slices from 0, as above); exactly symmetric
        # (mirrored)
        for i in range(d):
            row = P[k, i, i:]
            for j in range(row.shape[0]):
                row[j] = 0.0
            for m in range(i, d):
                lm = Li[m, i : m + 1]
                a = lm[0]
                r = row[: m + 1 - i]
                for j in range(r.shape[0]):
                    r[j] += a * lm[j]
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
    gets the same products added in the same order as a loop of rank-1 updates. ``A`` is
    symmetric (a sum of x x^T): only its lower triangle is summed, then mirrored, which
    gives the same bits (x_i x_j and x_j x_i are the same product). Four rows at a time:
    ``(((a + p0) + p1) + p2) + p3`` is the loop's order, with one load and store of ``a``
    instead of four (0.82 -> 0.48 us per row at d = 100). Slices start at 0: numba's
    index wrap-around keeps LLVM from vectorising a loop that does not."""
    n, d = X.shape
    r = 0
    while r + 4 <= n:
        x0, x1, x2, x3 = X[r], X[r + 1], X[r + 2], X[r + 3]
        for i in range(d):
            a0, a1, a2, a3 = x0[i], x1[i], x2[i], x3[i]
            row = A[i, : i + 1]
            s0, s1, s2, s3 = x0[: i + 1], x1[: i + 1], x2[: i + 1], x3[: i + 1]
            for j in range(i + 1):
                row[j] = (((row[j] + a0 * s0[j]) + a1 * s1[j]) + a2 * s2[j]) + a3 * s3[j]
        r += 4
    for rest in range(r, n):
        xr = X[rest]
        for i in range(d):
            xi = xr[i]
            row = A[i, : i + 1]
            xs = xr[: i + 1]
            for j in range(i + 1):
                row[j] = row[j] + xi * xs[j]
    for r in range(n):
        yr = y[r]
        xr = X[r]
        for i in range(d):
            b[i] = b[i] + yr * xr[i]
    for i in range(d):
        for j in range(i):
            A[j, i] = A[i, j]


@jit
def square_sums(y, p, c, loss):  # type: ignore[no-untyped-def]
    """``c += y_t^2`` and ``loss += (p_t - y_t)^2`` one term after the other, as the
    regret's loop does (x ** 2 and x * x are both the correctly rounded square)."""
    for t in range(y.shape[0]):
        yt = y[t]
        e = p[t] - yt
        c += yt * yt
        loss += e * e
    return c, loss


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


# ---- AROW's diagonal forms (learners/arow.py, diagonal = "cov" / "prec") ----------------
@jit
def arow_diag_shrink(S, x, v, v_other, r, prec, out):  # type: ignore[no-untyped-def]
    """arow.shrink_covariance for a diagonal ``S`` into ``out`` (``out`` may be ``S``):
    the same operations per coordinate; the "cov" form's others' share sum_{j != top} q_j
    adds in index order (numpy's np.sum adds pairwise). Only nonzero x_j are touched."""
    d = x.shape[0]
    denom = v + v_other + r
    for i in range(d):
        out[i] = S[i]
    if prec:
        for i in range(d):
            xi = x[i]
            if xi != 0.0:
                out[i] = 1.0 / (1.0 / S[i] + xi * xi / r)
        return
    top = -1
    qtop = 0.0
    for i in range(d):
        xi = x[i]
        if xi != 0.0:
            qi = (S[i] * xi) * xi
            # np.argmax: the first largest, a NaN counting as the largest
            if top < 0 or (qtop == qtop and (qi > qtop or qi != qi)):
                top, qtop = i, qi
    if top < 0:
        return
    others = 0.0
    for i in range(d):
        xi = x[i]
        if xi != 0.0 and i != top:
            others += (S[i] * xi) * xi
    for i in range(d):
        xi = x[i]
        if xi != 0.0:
            rest = others if i == top else v - (S[i] * xi) * xi
            out[i] = S[i] * ((rest + v_other + r) / denom)


@jit
def diag_variance(S, x):  # type: ignore[no-untyped-def]
    """x' diag(S) x = x @ (S * x), summed in index order; clamped at 0 as arow.py's
    max(0.0, .) (a NaN gives 0.0, as Python's max does)."""
    v = 0.0
    for i in range(x.shape[0]):
        v += x[i] * (S[i] * x[i])
    return v if v > 0.0 else 0.0


@jit
def arow_diag_row(mu, S, x, y, r, prec, update_cov, out):  # type: ignore[no-untyped-def]
    """AROW's binary step (BinaryClassifier._learn + AROW._update) on ``mu``, ``S`` in
    place: out = (m, v, alpha, beta, updated, sigma_trace, sigma_min_diag)."""
    d = x.shape[0]
    m = dot(mu, x)
    v = diag_variance(S, x)
    alpha = 0.0
    beta = 0.0
    updated = y * m < 1.0
    if updated:
        beta = 1.0 / (v + r)
        h = 1.0 - y * m
        alpha = (h if h > 0.0 else 0.0) * beta
        ay = alpha * y
        for i in range(d):
            mu[i] = mu[i] + ay * (S[i] * x[i])
        if update_cov:
            arow_diag_shrink(S, x, v, 0.0, r, prec, S)
    tr = 0.0
    mn = S[0]
    for i in range(d):
        s = S[i]
        tr += s
        if mn == mn and (s < mn or s != s):  # np.min: NaN wins
            mn = s
    out[0], out[1], out[2], out[3] = m, v, alpha, beta
    out[4] = 1.0 if updated else 0.0
    out[5], out[6] = tr, mn


@jit
def arow_diag_many(mu, S, X, y, r, prec, update_cov, out):  # type: ignore[no-untyped-def]
    """arow_diag_row on each row in order (``mu``, ``S``: the caller's copies, updated in
    place); out[i] = row i's (m, v, alpha, beta, updated, trace, min)."""
    for i in range(X.shape[0]):
        arow_diag_row(mu, S, X[i], y[i], r, prec, update_cov, out[i])


@jit
def arow_reg_diag_row(mu, S, x, y, r, eps, prec, out):  # type: ignore[no-untyped-def]
    """AROWRegressor._learn for a diagonal ``S``, ``mu`` and ``S`` in place: out =
    (y_hat, e, v, updated)."""
    y_hat = dot(mu, x)
    e = y - y_hat
    v = diag_variance(S, x)
    updated = abs(e) > eps if eps > 0.0 else True
    if updated:
        delta = math.copysign(abs(e) - eps, e) if eps > 0.0 else e
        beta = 1.0 / (v + r)
        db = delta * beta
        for i in range(x.shape[0]):
            mu[i] = mu[i] + db * (S[i] * x[i])
        arow_diag_shrink(S, x, v, 0.0, r, prec, S)
    out[0], out[1], out[2] = y_hat, e, v
    out[3] = 1.0 if updated else 0.0


@jit
def arow_reg_diag_many(mu, S, X, y, r, eps, prec, out):  # type: ignore[no-untyped-def]
    """arow_reg_diag_row on each row in order; out[i] = row i's (y_hat, e, v, updated)."""
    for i in range(X.shape[0]):
        arow_reg_diag_row(mu, S, X[i], y[i], r, eps, prec, out[i])


# ---- the quantifiers' NEMSIS step (learners/quantification/_quantifier.py) -------------
#: inner-function codes of learners/quantification/nested.py
BA, LOGPOS, LOGNEG, NSS, NEGKLD = 0, 1, 2, 3, 4
#: outer gradient (gamma) kinds: Q_beta's, NegKLD's and BAKLD's linear weights, SCAN's (1, v)
PSI_Q, LIN_NEGKLD, LIN_BAKLD, LIN_LEVEL = 0, 1, 2, 3


@jit
def _xlogx(v):  # type: ignore[no-untyped-def]
    return v * math.log(v) if v > 0.0 else 0.0


@jit
def zeta(code, r1, r2, p, eps, kappa):  # type: ignore[no-untyped-def]
    """nested.zeta, the same operations."""
    n = 1.0 - p
    if code == BA:
        return 0.5 * (r1 + r2)
    if code == LOGPOS:
        return math.log(eps + p * r1 + n * (1.0 - r2))
    if code == LOGNEG:
        return math.log(eps + n * r2 + p * (1.0 - r1))
    if code == NSS:
        d = p * (1.0 - r1) - n * (1.0 - r2)
        return 1.0 - kappa * kappa * d * d
    a = eps + p * r1 + n * (1.0 - r2)
    b = eps + n * r2 + p * (1.0 - r1)
    ps = (p + eps) / (1.0 + 2.0 * eps)
    ns = 1.0 - ps
    h = -_xlogx(ps) - _xlogx(ns)
    return ps * math.log(a) + ns * math.log(b) + h - math.log(1.0 + 2.0 * eps)


@jit
def zeta_grad(code, r1, r2, p, eps, kappa):  # type: ignore[no-untyped-def]
    """nested.zeta_grad, the same operations."""
    n = 1.0 - p
    if code == BA:
        return 0.5, 0.5
    if code == LOGPOS:
        a = eps + p * r1 + n * (1.0 - r2)
        return p / a, -n / a
    if code == LOGNEG:
        b = eps + n * r2 + p * (1.0 - r1)
        return -p / b, n / b
    if code == NSS:
        d = p * (1.0 - r1) - n * (1.0 - r2)
        f = 2.0 * kappa * kappa * d
        return f * p, -f * n
    a = eps + p * r1 + n * (1.0 - r2)
    b = eps + n * r2 + p * (1.0 - r1)
    ps = (p + eps) / (1.0 + 2.0 * eps)
    ns = 1.0 - ps
    return ps * p / a - ns * p / b, -ps * n / a + ns * n / b


@jit
def outer_grad(kind, par, q1, q2, p, eps):  # type: ignore[no-untyped-def]
    """gamma = grad Psi at q_bar: NEMSIS._gamma / SCAN._gamma, the same operations
    (``par``: Q_beta's beta, BAKLD's C or SCAN's level)."""
    if kind == PSI_Q:  # nested.psi_q_grad(max(q1, 1e-6), max(q2, 1e-6), beta)
        x = 1e-6 if 1e-6 > q1 else q1
        yv = 1e-6 if 1e-6 > q2 else q2
        b2 = par * par
        zq = yv / (b2 * x + yv)
        u = 1.0 - zq
        return (1.0 + b2) * zq * zq, (1.0 + b2) * (u * u) / b2
    if kind == LIN_NEGKLD:
        ps = (p + eps) / (1.0 + 2.0 * eps)
        return ps, 1.0 - ps
    if kind == LIN_BAKLD:
        return par, 1.0 - par
    return 1.0, par


@jit
def _logaddexp(x, y):  # type: ignore[no-untyped-def]
    """numpy's npy_logaddexp, the same branches."""
    if x == y:
        return x + math.log(2.0)
    tmp = x - y
    if tmp > 0.0:
        return x + math.log1p(math.exp(-tmp))
    if tmp <= 0.0:
        return y + math.log1p(math.exp(tmp))
    return tmp


@jit
def nemsis_step(  # type: ignore[no-untyped-def]
    w, w_sum, xb, y, cfg, codes, sr, sq, rho, z, al, be, ga, w2, out
):
    """_Quantifier._nemsis_step (Algorithm 1, primal then dual step), the same operations
    in its order; w.xb and w.w add in index order. ``cfg`` = (p, eps, kappa, eta0,
    radius, lam, half_life, t, weight, gamma's par); ``codes`` = (zeta1, zeta2, gamma kind,
    logistic, ns). The new iterate goes to ``w2`` when it moved; w_sum, the sums and the
    duals are written in place. out = (eta, c, r_bar1, r_bar2, t, weight, moved)."""
    p, eps, kappa, eta0, radius = cfg[0], cfg[1], cfg[2], cfg[3], cfg[4]
    lam, half_life, t, weight, par = cfg[5], cfg[6], cfg[7], cfg[8], cfg[9]
    c1, c2, gkind, logistic, ns = codes[0], codes[1], codes[2], codes[3], codes[4]
    n = 1.0 - p
    d = w.shape[0]
    m = y * dot(w, xb)
    a1, a2, b1, b2, g1, g2 = al[0], al[1], be[0], be[1], ga[0], ga[1]
    if logistic:
        r = 1.0 - _logaddexp(0.0, -m)
        dr = 1.0 / (1.0 + math.exp(m)) if m > -700.0 else 1.0
    else:
        r = m if m < 1.0 else 1.0  # Python's min(1.0, m)
        dr = 1.0 if m < 1.0 else 0.0
    g = (1.0 if m > 0.0 else 0.0) if ns else r
    if y > 0:
        s1, s2 = g / p, 0.0
        c = g1 * a1 + g2 * b1
        scale = dr / p
    else:
        s1, s2 = 0.0, g / n
        c = g1 * a2 + g2 * b2
        scale = dr / n
    t += 1.0
    eta = eta0 / math.sqrt(t if lam == 1.0 else (half_life if half_life < t else t))
    moved = scale != 0.0 and c != 0.0
    cur = w
    if moved:
        f = eta * c * scale * y
        for i in range(d):
            w2[i] = w[i] + f * xb[i]
        norm = math.sqrt(dot(w2, w2))
        if norm > radius:
            f = radius / norm
            for i in range(d):
                w2[i] = w2[i] * f
        cur = w2
    if lam != 1.0:
        for i in range(d):
            w_sum[i] = w_sum[i] * lam
    for i in range(d):
        w_sum[i] = w_sum[i] + cur[i]
    weight = lam * weight + 1.0
    r1, r2, z1, z2 = rho[0], rho[1], z[0], z[1]
    pi1 = z1 + a1 * (s1 - r1) + a2 * (s2 - r2)
    pi2 = z2 + b1 * (s1 - r1) + b2 * (s2 - r2)
    sr1, sr2 = lam * sr[0] + s1, lam * sr[1] + s2
    sq1, sq2 = lam * sq[0] + pi1, lam * sq[1] + pi2
    sr[0], sr[1], sq[0], sq[1] = sr1, sr2, sq1, sq2
    rb1, rb2 = sr1 / weight, sr2 / weight
    qb1, qb2 = sq1 / weight, sq2 / weight
    # step 8 and _set_duals: rho = clip(r_bar, 0, 1) as Python's min(1.0, max(0.0, .))
    r1 = rb1 if rb1 > 0.0 else 0.0
    r1 = r1 if r1 < 1.0 else 1.0
    r2 = rb2 if rb2 > 0.0 else 0.0
    r2 = r2 if r2 < 1.0 else 1.0
    rho[0], rho[1] = r1, r2
    z[0] = zeta(c1, r1, r2, p, eps, kappa)
    z[1] = zeta(c2, r1, r2, p, eps, kappa)
    al[0], al[1] = zeta_grad(c1, r1, r2, p, eps, kappa)
    be[0], be[1] = zeta_grad(c2, r1, r2, p, eps, kappa)
    ga[0], ga[1] = outer_grad(gkind, par, qb1, qb2, p, eps)
    out[0], out[1], out[2], out[3] = eta, c, rb1, rb2
    out[4], out[5] = t, weight
    out[6] = 1.0 if moved else 0.0
