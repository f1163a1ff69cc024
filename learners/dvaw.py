"""Discounted Vovk-Azoury-Warmuth regression (Jacobsen & Cutkosky 2024, Alg. 1).

The module also holds the stacked O(d^2) kernel shared by ``vaw``, ``rls``,
``dvaw-ensemble`` and ``dvaw-sa``: every function works on N experts at once
(``P`` of shape (N, d, d), ``v`` of shape (N, d), one discount per expert), so an
ensemble updates all its experts in one vectorised computation (spec §3.5, last bullet).

References
----------
A. Jacobsen, A. Cutkosky (2024). Online Linear Regression in Dynamic Environments via
Discounting. ICML 2024, arXiv 2405.19175;
algorithm page ``docs/algorithms/dvaw.md``.
"""

from __future__ import annotations

import math
import sys
from typing import Any, ClassVar, NamedTuple

import numpy as np

from learners import _accel
from learners._constraints import Boolean, Constraint, Interval, NoneOr, Options
from learners.base import (
    Learner,
    Prediction,
    StateSize,
    StepReport,
    make_report,
    positive,
    readonly,
)

#: production regulariser floor relative to lambda (spec §3.7 item 3)
DEFAULT_FLOOR_RATIO = 1e-6
#: refresh period K of the stabilised mode (spec §3.7 item 2)
DEFAULT_REFRESH = 64
#: largest d whose refresh runs the compiled Cholesky; above it LAPACK's blocked one is
#: as fast (measured, one process: 0.15 vs 0.30 ms at d=100, 11.4 vs 17.4 ms at d=500,
#: 29-31 vs 29-30 ms at d=700, 91 vs 89 ms at d=1000)
COMPILED_REFRESH_MAX_DIM = 640
#: 2^1023: p + p overflows exactly when |p| reaches it
_HALF_OVERFLOW = 2.0**1023


def clip(z: Any, lo: float, hi: float) -> Any:
    """Clip_[lo,hi](z) (spec §0); a degenerate interval lo == hi returns lo."""
    return np.minimum(np.maximum(z, lo), hi)


class Begin(NamedTuple):
    """Quantities of spec §3.5 computed from x_t before the hint (all shape (N,) or (N, d))."""

    g: np.ndarray  # P_{t-1} x_t
    q: np.ndarray  # x^T P_{t-1} x
    c: np.ndarray  # gamma + q
    rho: np.ndarray  # q / c = x^T Sigma_t^{-1} x in [0, 1)
    mu: np.ndarray  # RLS a-priori prediction x^T v_{t-1}


class Stack(NamedTuple):
    """The learned state of N discounted-VAW experts (spec §10)."""

    P: np.ndarray  # (N, d, d) Sigma_t^{-1}
    v: np.ndarray  # (N, d) Sigma_t^{-1} theta_{t+1} (the forgetting-factor RLS estimate)
    Sigma: np.ndarray  # (N, d, d) Sigma_t
    theta: np.ndarray  # (N, d) theta_{t+1}
    ridge: np.ndarray  # (N,) r_t, the ridge level inside Sigma_t
    logdet: np.ndarray  # (N,) ln det Sigma_t by the O(1) recursion


def fresh_stack(n: int, dim: int, lam: float) -> Stack:
    """Sigma_0 = lam I, theta_1 = 0 (Alg. 1 initialisation), so P_0 = I / lam, v_0 = 0."""
    eye = np.eye(dim)
    return Stack(
        P=np.tile(eye / lam, (n, 1, 1)),
        v=np.zeros((n, dim)),
        Sigma=np.tile(eye * lam, (n, 1, 1)),
        theta=np.zeros((n, dim)),
        ridge=np.full(n, float(lam)),
        logdet=np.full(n, dim * math.log(lam)),
    )


def one_stack_size(dim: int) -> StateSize:
    """The bytes of a one-expert ``Stack``: P and Sigma (d x d), v and theta (d), ridge
    and logdet (1 each)."""
    return StateSize.of((16, "d^2", dim * dim), (16, "d", dim), (16, "", 1))


def discount(P: np.ndarray, gamma: np.ndarray) -> None:
    """P /= gamma per expert, in place, as P *= 1 / gamma: the same number to within one
    rounding (1/gamma is rounded once), and a multiplication instead of a division per
    entry (the compiled d = 100 P loop: 4.0 us dividing, 1.5 us multiplying); the kernel does
    the same operations. A subnormal gamma (below 2^-1022) makes 1/gamma inf, so zero
    entries turn NaN where a division keeps them 0; P overflows at such a gamma either
    way, and the stabilised guard refreshes it."""
    with np.errstate(over="ignore"):
        recip = 1.0 / gamma
    P *= recip[:, None, None]


def begin(P: np.ndarray, v: np.ndarray, x: np.ndarray, gamma: np.ndarray) -> Begin:
    """Spec §3.5 first half: g, q, c, rho, mu for every expert (no state change)."""
    k = _accel.get()
    if k is not None:
        n, d = v.shape
        g = np.empty((n, d))
        q, c, rho, mu = np.empty((4, n))
        k.begin(P, v, x, gamma, g, q, c, rho, mu)
        return Begin(g=g, q=q, c=c, rho=rho, mu=mu)
    g = P @ x
    q = g @ x
    c = gamma + q
    return Begin(g=g, q=q, c=c, rho=q / c, mu=v @ x)


def hinted(b: Begin, hint: Any) -> np.ndarray:
    """y_hat = mu + rho (hint - mu) = <x_t, w_t> (spec §3.5; Alg. 1 with the O(d^2) form)."""
    return b.mu + b.rho * (hint - b.mu)


def commit(
    s: Stack,
    b: Begin,
    x: np.ndarray,
    y: float,
    gamma: np.ndarray,
    log_gamma: np.ndarray,
    out: Spare | None = None,
) -> Stack:
    """Spec §3.5 second half: the RLS a-posteriori update; the hint never enters (§3.2).

    ``out`` (from :func:`spare_for`) are buffers the new P and Sigma are written into
    instead of fresh arrays (same operations, same bits); they must not be part of ``s``.
    The input stack is never written, so a step that raises leaves the learner as it was.
    """
    k = _accel.get()
    if k is not None:
        return _commit_compiled(k, s, b, x, y, gamma, log_gamma, out)
    ci = 1.0 / b.c
    v = s.v + (b.g * ci[:, None]) * (y - b.mu)[:, None]  # v_t = v_{t-1} + k_t (y_t - mu_t)
    unit = gamma.size == 1 and gamma[0] == 1.0  # z / 1.0 == z and 1.0 * z == z, bit for bit
    # P_t = (P_{t-1} - g g^T / c) / gamma (see discount), then symmetrised (§3.7 item 1),
    # in one buffer.
    if out is None:
        P = b.g[:, :, None] * b.g[:, None, :]
    else:
        P = np.multiply(b.g[:, :, None], b.g[:, None, :], out=out.P)
    P *= ci[:, None, None]
    np.subtract(s.P, P, out=P)
    if not unit:
        discount(P, gamma)
    # Symmetrising is the identity here: g_i g_j == g_j g_i exactly, so a symmetric P_{t-1}
    # (fresh, refreshed, restored or committed) gives an exactly symmetric P_t, and
    # 0.5 * (p + p) == p unless p + p overflows (|p| >= 2^1023) or p is NaN: only then
    # run it, to stay bit for bit the recursion above.
    # One BLAS pass decides it for almost every step: a finite sum of squares bounds every
    # |p| below 2^512 (and has no NaN); otherwise the exact max/min test decides. (vdot,
    # not @ or dot: it does not report overflow to numpy's errstate, which must not raise
    # here under np.errstate(all="raise") when the max/min test would not.)
    flat = P.reshape(-1)
    if not math.isfinite(np.vdot(flat, flat)) and not (
        P.max() < _HALF_OVERFLOW and P.min() > -_HALF_OVERFLOW
    ):
        P = 0.5 * (P + P.transpose(0, 2, 1))
    # Sigma_t = gamma Sigma + x x^T
    if out is None:
        Sigma = gamma[:, None, None] * s.Sigma
        Sigma += np.outer(x, x)
    else:
        xx = np.multiply(x[:, None], x[None, :], out=out.xx)  # np.outer(x, x)
        if unit:
            Sigma = np.add(s.Sigma, xx, out=out.Sigma)
        else:
            Sigma = np.multiply(gamma[:, None, None], s.Sigma, out=out.Sigma)
            Sigma += xx
    theta = gamma[:, None] * s.theta + y * x  # theta_{t+1} = gamma theta_t + y_t x_t
    dim = x.shape[0]
    # ln det Sigma_t = ln det Sigma_{t-1} + d ln gamma + ln(1 + q/gamma)
    logdet = s.logdet + dim * log_gamma + np.log1p(b.q / gamma)
    return Stack(P, v, Sigma, theta, s.ridge * gamma, logdet)


def _commit_compiled(
    k: Any,
    s: Stack,
    b: Begin,
    x: np.ndarray,
    y: float,
    gamma: np.ndarray,
    log_gamma: np.ndarray,
    out: Spare | None,
) -> Stack:
    """:func:`commit` by the compiled kernel; it also evaluates the guard of
    :func:`unhealthy` for the new stack, kept for :func:`stabilise` (``_last_health``)."""
    n, d = s.v.shape
    if out is None:
        P, Sigma = np.empty(s.P.shape), np.empty(s.P.shape)
    else:
        P, Sigma = out.P, out.Sigma
    vt = np.empty((2, n, d))
    rl = np.empty((2, n))
    healthy = np.empty(n, dtype=np.bool_)
    k.commit(
        s.P,
        s.v,
        s.Sigma,
        s.theta,
        s.ridge,
        s.logdet,
        b.g,
        b.q,
        b.c,
        b.mu,
        x,
        float(y),
        gamma,
        log_gamma,
        P,
        vt,
        Sigma,
        rl,
        healthy,
    )
    v, theta = vt
    ridge, logdet = rl
    new = Stack(P, v, Sigma, theta, ridge, logdet)
    _last_health[:] = [P, v, b.c, healthy]
    return new


def step_compiled(k: Any, obj: Any, x: np.ndarray, y: float) -> tuple[Stack, np.ndarray]:
    """:func:`begin` then :func:`commit` of a :class:`StackLearner`'s stack in one compiled
    call (into its spare buffers) -> (new stack, sc): ``sc[2:6]`` are Begin's q, c, rho, mu
    and ``sc[6]`` is 1.0 where the expert passes the guard of :func:`unhealthy`, per
    expert. The learner is unchanged until the caller stores the stack."""
    out = spare_for(obj)
    P, Sigma, v = obj.P_, obj.Sigma_, obj.v_
    n, d = v.shape
    if out is None:
        P2, Sigma2 = np.empty(P.shape), np.empty(Sigma.shape)
    else:
        P2, Sigma2 = out.P, out.Sigma
    vt = np.empty((2, n, d))
    sc = np.empty((7, n))
    k.step(
        P,
        v,
        Sigma,
        obj.theta_,
        obj.ridge_,
        obj.logdet_,
        x,
        y,
        obj._gamma,
        obj._log_gamma,
        P2,
        Sigma2,
        vt,
        sc,
    )
    return Stack(P2, vt[0], Sigma2, vt[1], sc[0], sc[1]), sc


def begin_of(sc: np.ndarray) -> Begin:
    """The :class:`Begin` of a :func:`step_compiled` (without g, which only commit uses)."""
    return Begin(np.empty((sc.shape[1], 0)), sc[2], sc[3], sc[4], sc[5])


#: [P, v, c, healthy] of the last compiled commit: the guard already evaluated for them
_last_health: list[Any] = [None, None, None, None]


class Spare(NamedTuple):
    """Buffers ``commit`` writes the next P and Sigma into, and a d x d scratch for x x^T."""

    P: np.ndarray
    Sigma: np.ndarray
    xx: np.ndarray


#: largest P (bytes) kept double-buffered: the two spare buffers double a learner's resident
#: P and Sigma between steps; above this (dvaw-sa at d=500: 840 MB per matrix) each step
#: allocates fresh arrays instead, as before (the same bits either way)
MAX_SPARE_BYTES = 64 << 20


def spare_for(obj: Any) -> Spare | None:
    """Double buffering for a learner's stack: it owns two P and two Sigma buffers (made on
    first use, private: ``_bufs`` is not state) and each step writes into the pair its
    state does not hold, so a step allocates no d x d arrays, and the state is only
    replaced, never written, when the step has succeeded (a step that raises part-way
    leaves it as it was). A state array from elsewhere (a refresh, a restore) is never
    written either: it is simply not one of the two. Nor is a buffer anything else still
    refers to (a caller holding an old ``P_``, a view of it, a shallow copy of the
    learner): it is replaced by a fresh one instead. None (allocate per step, as before)
    for stacks above ``MAX_SPARE_BYTES`` or off CPython (reference counts unknown)."""
    P, Sigma = obj.P_, obj.Sigma_
    if P.nbytes > MAX_SPARE_BYTES or not _CPYTHON:
        obj.__dict__.pop("_bufs", None)
        return None
    bufs: list[np.ndarray] | None = obj.__dict__.get("_bufs")
    if bufs is None or bufs[0].shape != P.shape or bufs[2].shape != Sigma.shape:
        bufs = [
            np.empty(P.shape),
            np.empty(P.shape),
            np.empty(Sigma.shape),
            np.empty(Sigma.shape),
            np.empty(P.shape[1:]),
        ]
        obj._bufs = bufs
    return Spare(
        _unshared(bufs, 1 if P is bufs[0] else 0),
        _unshared(bufs, 3 if Sigma is bufs[2] else 2),
        bufs[4],
    )


_CPYTHON = sys.implementation.name == "cpython"


def _unshared(bufs: list[np.ndarray], i: int) -> np.ndarray:
    """``bufs[i]``, or a fresh buffer in its place if anything besides ``bufs`` refers to it
    (the list, the local name and getrefcount's argument make 3)."""
    a = bufs[i]
    if sys.getrefcount(a) > 3:
        a = bufs[i] = np.empty(a.shape)
    return a


def _all_healthy(s: Stack, b: Begin) -> bool:
    """True only if no expert fails the guard of :func:`unhealthy` (a few reductions; min
    and max propagate NaN, so a NaN fails it). False means: ask :func:`unhealthy`."""
    c = b.c
    if c.size == 1:  # one expert: compare the scalar instead of reducing
        c0 = c[0]
        if not (c0 > 0.0 and c0 < math.inf):
            return False
    elif not (c.size and c.min() > 0.0 and c.max() < math.inf):
        return False
    P = s.P
    diag = P.reshape(P.shape[0], -1)[:, :: P.shape[1] + 1]  # the diagonals, as np.diagonal
    # a finite sum of squares proves every element finite (np.vdot: one BLAS pass that
    # reports nothing to numpy's errstate); an overflowing one sends the caller to the
    # exact check
    return bool(
        diag.min() > 0.0 and math.isfinite(np.vdot(diag, diag)) and math.isfinite(np.vdot(s.v, s.v))
    )


def unhealthy(s: Stack, b: Begin) -> np.ndarray:
    """Spec §3.7 item 1 guard: c <= 0 or non-finite, or a bad diagonal of P."""
    if _all_healthy(s, b):
        return np.zeros(b.c.shape, dtype=bool)
    diag = np.diagonal(s.P, axis1=1, axis2=2)
    bad_c = ~np.isfinite(b.c) | (b.c <= 0.0)
    bad_p = ~np.all(np.isfinite(diag) & (diag > 0.0), axis=1) | ~np.all(np.isfinite(s.v), axis=1)
    return np.asarray(bad_c | bad_p)


def refresh_inverse(s: Stack, idx: np.ndarray, floor: float) -> tuple[Stack, int]:
    """Recompute P = Sigma^{-1}, v = Sigma^{-1} theta for experts ``idx`` (spec §3.7 item 2).

    With ``floor`` > 0, a ridge level below it is lifted to it first (§3.7 item 3).
    Returns the new stack and how many experts had their floor lifted.
    """
    if idx.size == 0:
        return s, 0
    P, v, Sigma, ridge, logdet = s.P.copy(), s.v.copy(), s.Sigma.copy(), s.ridge.copy(), s.logdet
    logdet = logdet.copy()
    dim = P.shape[1]
    eye = np.eye(dim)
    lifted = 0
    if floor > 0.0:
        low = idx[ridge[idx] < floor]
        if low.size:
            Sigma[low] += (floor - ridge[low])[:, None, None] * eye
            ridge[low] = floor
            lifted = int(low.size)
    k = _accel.get() if dim <= COMPILED_REFRESH_MAX_DIM else None
    if k is not None and k.refresh(
        Sigma, s.theta, P, v, logdet, idx, np.empty((dim, dim)), np.empty((dim, dim))
    ):
        return Stack(P, v, Sigma, s.theta, ridge, logdet), lifted
    sub = Sigma[idx]
    try:
        chol = np.linalg.cholesky(sub)
        inv_l = np.linalg.inv(chol)
        P[idx] = inv_l.transpose(0, 2, 1) @ inv_l
        logdet[idx] = 2.0 * np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(axis=1)
    except np.linalg.LinAlgError:
        # Sigma lost definiteness to round-off: invert on its eigenvalues, floored.
        w, V = np.linalg.eigh(sub)
        w = np.maximum(w, max(floor, np.finfo(float).tiny))
        P[idx] = (V / w[:, None, :]) @ V.transpose(0, 2, 1)
        logdet[idx] = np.log(w).sum(axis=1)
    P[idx] = 0.5 * (P[idx] + P[idx].transpose(0, 2, 1))
    v[idx] = np.einsum("nij,nj->ni", P[idx], s.theta[idx])
    return Stack(P, v, Sigma, s.theta, ridge, logdet), lifted


def stabilise(s: Stack, b: Begin, due: np.ndarray | bool, floor: float) -> tuple[Stack, int, int]:
    """Refresh experts that are ``due`` (a mask, or one bool for all) or fail the guard
    -> (stack, refreshed, lifted)."""
    if due is False and _all_healthy(s, b):
        return s, 0, 0  # nothing to refresh (what refresh_inverse does for no index)
    if type(due) is bool:
        due = np.full(b.c.shape, due)
    idx = np.flatnonzero(due | unhealthy(s, b))
    s, lifted = refresh_inverse(s, idx, floor)
    return s, int(idx.size), lifted


def resolve_floor(lam: float, stabilised: bool, lambda_floor: float | None) -> float:
    """The effective regulariser floor: 0 in exact mode, default 1e-6 lam when stabilised."""
    if not stabilised:
        return 0.0
    return DEFAULT_FLOOR_RATIO * lam if lambda_floor is None else float(lambda_floor)


def stack_attrs(obj: Any) -> Stack:
    return Stack(obj.P_, obj.v_, obj.Sigma_, obj.theta_, obj.ridge_, obj.logdet_)


def set_stack_attrs(obj: Any, s: Stack) -> None:
    obj.P_, obj.v_, obj.Sigma_, obj.theta_, obj.ridge_, obj.logdet_ = s


STABILISER_CONSTRAINTS: dict[str, Constraint] = {
    "stabilised": Boolean(),
    "refresh": Interval(1, float("inf"), integer=True),
    "lambda_floor": NoneOr(Interval(0.0, float("inf"))),
}


class StackLearner(Learner):
    """A learner whose learned state is a :class:`Stack` of discounted-VAW experts, kept in
    the attributes ``P_``, ``v_``, ``Sigma_``, ``theta_``, ``ridge_``, ``logdet_``, with one
    discount per expert in ``_gamma`` (and its log in ``_log_gamma``): ``vaw``, ``rls``,
    ``dvaw``, ``dvaw-ensemble`` and ``dvaw-sa``."""

    P_: np.ndarray
    v_: np.ndarray
    Sigma_: np.ndarray
    theta_: np.ndarray
    ridge_: np.ndarray
    logdet_: np.ndarray
    _gamma: np.ndarray
    _log_gamma: np.ndarray

    def _begin(self, x: np.ndarray) -> Begin:
        """:func:`begin` for every expert of the stack (no state change)."""
        return begin(self.P_, self.v_, x, self._gamma)

    def _commit(self, b: Begin, x: np.ndarray, y: float) -> Stack:
        """:func:`commit` of the learner's stack (into its spare buffers); the learner is
        unchanged until the caller stores the result with :func:`set_stack_attrs`."""
        return commit(stack_attrs(self), b, x, y, self._gamma, self._log_gamma, spare_for(self))


class OneExpert(StackLearner):
    """A :class:`StackLearner` of a single expert (``vaw``, ``rls``, ``dvaw``): its weights
    are that expert's ``v``."""

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        return one_stack_size(d)

    @property
    def weights(self) -> np.ndarray:
        """v_t: the weights the next round starts from (w_t for a zero-leverage x)."""
        return readonly(self.v_[0])


class DiscountedVAW(OneExpert):
    """Discounted Vovk-Azoury-Warmuth forecaster with a fixed discount (Alg. 1, O(d^2) form).

    Each round: Sigma_t = gamma Sigma_{t-1} + x x^T, w_t = Sigma_t^{-1}(hint x_t + gamma theta_t),
    predict <x_t, w_t>, then theta_{t+1} = gamma theta_t + y_t x_t. Implemented as the
    forgetting-factor RLS update with the label replaced by the hint (spec §3.5).

    Parameters
    ----------
    dim : int
        Number of features (add an intercept feature yourself; the model has no bias).
    gamma : float, default=0.99
        Discount factor in (0, 1]; gamma = 1 with ``hint="zero"`` is classic VAW.
    lam : float, default=1.0
        Regulariser lambda > 0 (it is discounted too: gamma^t lam, spec §3.2).
    hint : {"zero", "self", "external"}, default="zero"
        The hint y~_t (spec §3.6): ``"zero"`` uses 0; ``"self"`` the self-confident clipped
        hint Clip_B(mu_t) with B_t = [y_{t-1} - M_t, y_{t-1} + M_t]; ``"external"`` the
        event's ``hint`` (0 when an event has none).
    stabilised : bool, default=True
        Spec §3.7: guard plus periodic Cholesky refresh of P from (Sigma, theta) and a
        regulariser floor. ``False`` is the exact paper recursion (it can overflow when
        a feature direction is not excited for ~709/ln(1/gamma) rounds).
    refresh : int, default=64
        Refresh period K of the stabilised mode.
    lambda_floor : float or None, default=None
        Floor of the decaying ridge level at refreshes; None means 1e-6 * lam.

    Attributes
    ----------
    P_ : ndarray of shape (1, dim, dim)
        Sigma_t^{-1}.
    v_ : ndarray of shape (1, dim)
        Sigma_t^{-1} theta_{t+1}, the forgetting-factor RLS estimate.
    Sigma_, theta_ : ndarray
        Sigma_t and theta_{t+1} kept for the refresh.
    ridge_, logdet_ : ndarray of shape (1,)
        Ridge level inside Sigma_t and ln det Sigma_t.
    t_ : int
        Rounds learned.
    M_, y_prev_ : float
        Running max |y_s - y_{s-1}| and the last label (self-confident hint range).

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = DiscountedVAW(2, gamma=0.95)
    >>> _ = learn_stream(model, linear_stream([1.0, -1.0], 400, then=(200, [-1.0, 2.0])))
    >>> print(model.weights.round(2))
    [-1.  2.]

    References
    ----------
    Jacobsen & Cutkosky (2024), Alg. 1, Prop. A.1; ``docs/algorithms/dvaw.md``.
    """

    kind: ClassVar[str] = "dvaw"
    gamma: float
    lam: float
    hint: str
    stabilised: bool
    refresh: int
    lambda_floor: float | None
    _constraints: ClassVar[dict[str, Constraint]] = {
        "gamma": Interval(0.0, 1.0, closed="right"),
        "lam": positive(),
        "hint": Options(("zero", "self", "external")),
        **STABILISER_CONSTRAINTS,
    }

    def __init__(
        self,
        dim: int,
        *,
        gamma: float = 0.99,
        lam: float = 1.0,
        hint: str = "zero",
        stabilised: bool = True,
        refresh: int = DEFAULT_REFRESH,
        lambda_floor: float | None = None,
    ):
        self._init_from(locals())
        self._gamma = np.array([float(gamma)])
        self._log_gamma = np.log(self._gamma)
        self._floor = resolve_floor(float(lam), stabilised, lambda_floor)
        set_stack_attrs(self, fresh_stack(1, self.dim, float(lam)))
        self.t_ = 0
        self.M_ = 0.0
        self.y_prev_ = 0.0
        self.refreshes_ = 0

    def _hint_value(self, b: Begin, hint: float | None) -> float:
        if self.hint == "self":
            # fixed point of the circular self-confident hint (spec §3.6): Clip_B(mu_t)
            return float(clip(b.mu[0], self.y_prev_ - self.M_, self.y_prev_ + self.M_))
        if self.hint == "external" and hint is not None:
            return hint
        return 0.0

    def _forecast(self, x: np.ndarray, hint: float | None) -> tuple[Begin, float, float]:
        b = self._begin(x)
        h = self._hint_value(b, hint)
        return b, h, float(hinted(b, h)[0])

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        return Prediction(self._forecast(x, hint)[2])

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = _accel.get()
        if k is not None:
            return self._learn_compiled(k, x, y, hint)
        b, h, y_hat = self._forecast(x, hint)
        s = self._commit(b, x, y)
        self.t_ += 1
        if self.stabilised:
            s, n_ref, _ = stabilise(s, b, self.t_ % self.refresh == 0, self._floor)
            self.refreshes_ += n_ref
        set_stack_attrs(self, s)
        self.M_ = max(self.M_, abs(y - self.y_prev_))
        self.y_prev_ = float(y)
        err = y_hat - y
        return make_report(
            y_hat,
            err * err,
            {"hint": h, "leverage": float(b.rho[0]), "rls_prediction": float(b.mu[0])},
        )

    def _learn_compiled(self, k: Any, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        """``_learn`` with begin and commit in one compiled call; the hint, the prediction
        and the report are the same float operations on Python floats."""
        s, sc = step_compiled(k, self, x, float(y))
        _, _, _, _, rho, mu, ok = sc[:, 0].tolist()
        if self.hint == "self":
            h = float(clip(mu, self.y_prev_ - self.M_, self.y_prev_ + self.M_))
        elif self.hint == "external" and hint is not None:
            h = hint
        else:
            h = 0.0
        y_hat = mu + rho * (h - mu)
        self.t_ += 1
        if self.stabilised:
            due = self.t_ % self.refresh == 0
            if due or ok != 1.0:
                s, n_ref, _ = stabilise(s, begin_of(sc), due, self._floor)
                self.refreshes_ += n_ref
        set_stack_attrs(self, s)
        self.M_ = max(self.M_, abs(y - self.y_prev_))
        self.y_prev_ = float(y)
        err = y_hat - y
        return make_report(y_hat, err * err, {"hint": h, "leverage": rho, "rls_prediction": mu})

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {},
            {"gamma": 0.9, "hint": "self", "lam": 0.5},
            {"gamma": 1.0, "hint": "external", "stabilised": False},
            {"gamma": 0.8, "refresh": 3, "lambda_floor": 0.1},
        ]
