"""Passive-aggressive regression (Crammer et al. 2006), no intercept.

References
----------
Crammer, Dekel, Keshet, Shalev-Shwartz, Singer (2006). Online Passive-Aggressive Algorithms.
JMLR 7. Restated as the APAS paper's eqs. (1)-(3);
see ``docs/algorithms/apas.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._constraints import Constraint, Interval, Options
from learners.base import (
    BatchInterrupted,
    Learner,
    LinearRegressor,
    StepReport,
    StepReports,
    make_report,
    quiet_underflow,
)
from learners.pa_classifier import pa_classification_step

_FLOAT64 = np.dtype(np.float64)
_vdot = np.vdot
_isfinite = math.isfinite
_new = object.__new__
#: the compiled kernels' variant codes (learners/_kernels.py PA, PA1, PA2)
_VARIANT_CODE = {"pa": 0, "pa1": 1, "pa2": 2}


def pa_step_size(a: float, epsilon: float, sq_norm: float, variant: str, C: float) -> float:
    """tau_t of PA / PA-I / PA-II for residual size ``a`` (spec §1.3); 0 when passive: the
    step of :func:`~learners.pa_classifier.pa_classification_step` for the
    epsilon-insensitive loss ``a - epsilon`` in place of the hinge.

    A zero ``x`` gives tau = 0 for PA and PA-I (the update would not move ``w`` anyway).
    """
    return pa_classification_step(a - epsilon, sq_norm, variant, C)


class PARegressor(LinearRegressor):
    """Passive-aggressive regression with the epsilon-insensitive loss.

    Parameters
    ----------
    dim : int
        Number of features.
    variant : {"pa", "pa1", "pa2"}, default="pa"
        PA (hard constraint), PA-I (step clipped at ``C``) or PA-II (squared slack).
    C : float, default=1.0
        Aggressiveness, in (0, inf); unused by plain PA.
    epsilon : float, default=0.1
        Insensitivity of the loss ``max(0, |w.x - y| - epsilon)``, in [0, inf).

    Attributes
    ----------
    w_ : ndarray of shape (dim,)
        Current weights (start at zero).
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = PARegressor(3, variant="pa2", C=1.0, epsilon=0.0)
    >>> _ = learn_stream(model, linear_stream([1.0, -2.0, 0.5], 500))
    >>> print(model.weights.round(2))
    [ 1.  -2.   0.5]

    References
    ----------
    Crammer et al. (2006), JMLR 7; ``docs/algorithms/apas.md``.
    """

    kind: ClassVar[str] = "pa"
    _constraints: ClassVar[dict[str, Constraint]] = {
        "variant": Options(("pa", "pa1", "pa2")),
        "C": Interval(0.0, float("inf"), closed="right"),
        "epsilon": Interval(0.0, float("inf"), closed="left"),
    }

    variant: str
    C: float
    epsilon: float

    def __init__(self, dim: int, *, variant: str = "pa", C: float = 1.0, epsilon: float = 0.1):
        self._init_params(dim, {"variant": variant, "C": C, "epsilon": epsilon})

    def _learn_compiled(self, k: Any, x: np.ndarray, y: float) -> StepReport:
        """One step by the compiled kernel (learners/_kernels.py ``pa_step``): the same
        operations as below, w.x and x.x summed in index order."""
        w2 = np.empty(self.dim)
        y_hat, e, excess, tau, _ = k.pa_step(
            self.w_, x, y, self.epsilon, _VARIANT_CODE[self.variant], self.C, w2
        )
        if tau > 0.0:
            self.w_ = w2
        self.t_ += 1
        return _report(y_hat, e, excess, tau)

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = _accel.get()
        if k is not None:
            return self._learn_compiled(k, x, float(y))
        y_hat = float(self.w_ @ x)
        e = y_hat - y
        a = abs(e)
        tau = pa_step_size(a, self.epsilon, float(x @ x), self.variant, self.C)
        if tau > 0.0:
            # eq. (2): w <- w + sign(y - w.x) * tau * x
            self.w_ = self.w_ - np.sign(e) * tau * x
        self.t_ += 1
        return make_report(y_hat, e * e, {"eps_loss": max(0.0, a - self.epsilon), "tau": tau})

    def learn(self, x: Any, y: Any, *, hint: float | None = None) -> StepReport:
        """``Learner.learn`` with its checks and ``_learn`` inlined for the common event (a
        float64 vector of the right size, a float label, no hint): the same checks in the
        same order with the same messages, the same expressions in the same order, so the
        same bits; ``w`` gets one new array per update instead of three. Any other input
        takes the base class's path."""
        if (
            hint is not None
            or type(x) is not np.ndarray
            or x.dtype is not _FLOAT64
            or x.ndim != 1
            or x.shape[0] != self.dim
            or type(y) is not float
        ):
            return Learner.learn(self, x, y, hint=hint)
        k = _accel.get()
        if k is not None and _isfinite(y):
            # the compiled step computes x.x anyway: a finite one proves x finite (as
            # _check_x's fast path); otherwise nothing is kept and the base path decides
            w2 = np.empty(self.dim)
            y_hat, e, excess, tau, sq = k.pa_step(
                self.w_, x, y, self.epsilon, _VARIANT_CODE[self.variant], self.C, w2
            )
            if not _isfinite(sq):
                return Learner.learn(self, x, y, hint=hint)
            if tau > 0.0:
                self.w_ = w2
            self.t_ += 1
            return _report(y_hat, e, excess, tau)
        # _check_x's fast path: a finite x.x proves x finite (otherwise the base path
        # decides, with its messages), then _check_y's
        sq = float(_vdot(x, x))
        if not _isfinite(sq):
            return Learner.learn(self, x, y, hint=hint)
        if not _isfinite(y):
            raise ValueError("y must be finite (no NaN or inf)")
        if k is not None:
            return self._learn_compiled(k, x, y)
        w = self.w_
        # np.vdot(a, b) is a @ b bit for bit (numpy's BLAS dot for 1-d float64 both), but
        # reports nothing to numpy's errstate. A finite dot product can only have
        # underflowed, so while underflow is ignored (numpy's default) vdot stands in for
        # _learn's w @ x and x @ x; otherwise, or for a non-finite w.x, they run as there,
        # in the same order, warning or raising as there.
        quiet = quiet_underflow()
        y_hat = float(_vdot(w, x))
        if not (quiet and _isfinite(y_hat)):
            y_hat = float(w @ x)
        e = y_hat - y
        a = abs(e)
        eps = self.epsilon
        if not quiet:
            sq = float(x @ x)
        # pa_step_size(a, eps, sq, variant, C), inlined
        excess = a - eps
        if excess <= 0.0:
            tau = 0.0
        elif self.variant == "pa2":
            tau = excess / (sq + 1.0 / (2.0 * self.C))
        elif sq <= 0.0:
            tau = 0.0
        else:
            tau = excess / sq
            if self.variant == "pa1":
                tau = min(self.C, tau)
        if tau > 0.0:
            # eq. (2) as in _learn, w - (sign(e) tau) x: e != 0 here (a > epsilon >= 0), and
            # a NaN e gives a NaN tau, which does not update
            step = np.multiply(tau if e > 0.0 else -tau, x)
            self.w_ = np.subtract(w, step, step)
        self.t_ += 1
        return _report(y_hat, e, excess, tau)

    def learn_many(
        self, X: Any, y: Sequence[Any], *, hints: Sequence[float | None] | None = None
    ) -> Sequence[StepReport]:
        """``learn`` on each row in order, bit for bit the loop (same expressions, same
        BLAS dot per row; ``w`` updated in two private buffers instead of a new array per
        update). ``x.x`` is only computed on the rounds that need it (``tau`` ignores it when
        the loss is zero), unless numpy's errstate does not ignore underflow: then on every
        round, as ``learn`` does, so the same rounds warn or raise."""
        rows, labels, _ = self._check_many(X, y, hints)
        k = _accel.get()
        if k is not None:
            return self._learn_many_compiled(k, X, rows, labels)
        eps, variant, C = self.epsilon, self.variant, self.C
        w = self.w_
        buf = None
        reports: list[StepReport] = []
        append = reports.append
        multiply, subtract, report = np.multiply, np.subtract, _report
        exact = not quiet_underflow()
        vdot, isfinite = _vdot, _isfinite
        try:
            for x, yv in zip(rows, labels, strict=True):
                # vdot for @ where that reports nothing lost (see learn)
                if exact:
                    y_hat = float(w @ x)
                else:
                    y_hat = float(vdot(w, x))
                    if not isfinite(y_hat):
                        y_hat = float(w @ x)
                e = y_hat - yv
                a = abs(e)
                excess = a - eps
                if excess <= 0.0:
                    tau = 0.0
                    if exact:  # _learn's x.x, for what it reports under np.errstate(under=)
                        float(x @ x)
                else:
                    if exact:
                        sq = float(x @ x)
                    else:
                        sq = float(vdot(x, x))
                        if not isfinite(sq):
                            sq = float(x @ x)
                    tau = pa_step_size(a, eps, sq, variant, C)
                    if tau > 0.0:
                        if buf is None:  # first update: private buffers, self.w_ untouched
                            w, buf = w.copy(), np.empty_like(w)
                        # eq. (2) as in _learn: w - (sign(e) tau) x, e != 0 (a > eps >= 0)
                        multiply(tau if e > 0.0 else -tau, x, buf)
                        subtract(w, buf, buf)
                        w, buf = buf, w
                append(report(y_hat, e, excess, tau))
        except ValueError as exc:
            raise BatchInterrupted(len(reports), reports, exc) from exc
        finally:  # an exception mid-batch leaves the state of the rows learned, as the loop
            self.w_ = w
            self.t_ += len(reports)
        return reports

    def _learn_many_compiled(
        self, k: Any, X: Any, rows: list[np.ndarray], labels: list[Any]
    ) -> StepReports:
        """The checked batch in one compiled call (``pa_many``: ``pa_step`` on each row in
        order, so a loop of the compiled ``learn`` bit for bit)."""
        if type(X) is np.ndarray and X.dtype is _FLOAT64 and X.ndim == 2:
            M = X  # validated as one matrix by _check_many
        else:
            M = np.array(rows, dtype=np.float64).reshape(len(rows), self.dim)
        out = np.empty((len(rows), 4))
        w2 = np.empty(self.dim)
        k.pa_many(
            self.w_, M, np.array(labels, dtype=np.float64), self.epsilon,
            _VARIANT_CODE[self.variant], self.C, w2, out,
        )  # fmt: skip
        if (out[:, 3] > 0.0).any():
            self.w_ = w2
        self.t_ += len(rows)
        return _reports(out)

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"variant": "pa1", "C": 0.5}, {"variant": "pa2", "epsilon": 0.0}]


_PA_DIAGNOSTICS = frozenset(("eps_loss", "tau"))


def _reports(out: np.ndarray) -> StepReports:
    """The compiled batch's reports as columns (``out``: y_hat, e, excess, tau per row):
    the predictions, the losses ``e * e`` (numpy's float64 product is the Python float's),
    and each row's ``_report`` built only when asked for."""

    def row(i: int) -> StepReport:
        return _report(*out[i].tolist())

    e = out[:, 1]
    with np.errstate(all="ignore"):  # an overflowed step's e * e: inf, silent as in Python
        losses = (e * e).tolist()
    return StepReports(out[:, 0].tolist(), losses, row, _PA_DIAGNOSTICS)


def _report(y_hat: float, e: float, excess: float, tau: float) -> StepReport:
    """The ``StepReport`` of one PA step (``make_report`` without its keyword call)."""
    report = _new(StepReport)
    report.__dict__.update(
        prediction=y_hat,
        loss=e * e,
        diagnostics={"eps_loss": max(0.0, excess), "tau": tau},
        scores=None,
    )
    return report
