"""Recursive least squares with an exponential forgetting factor (baseline of spec §7.2).

References
----------
Haykin, Adaptive Filter Theory, ch. 10 (exponentially weighted RLS); spec
``docs/algorithms/dvaw.md`` (the same recursion is the discounted-VAW core).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._constraints import Constraint, Interval
from learners.base import Prediction, StepReport, make_report, positive
from learners.dvaw import OneExpert, fresh_stack, set_stack_attrs, step_compiled


class RLS(OneExpert):
    """Exponentially weighted recursive least squares, a-priori prediction mu_t = x^T v_{t-1}.

    v_t minimises sum_{s<=t} forgetting^{t-s} (y_s - x_s^T w)^2 / 2 + forgetting^t delta |w|^2 / 2,
    i.e. P_0 = I / delta. The plain recursion (symmetrised) is used: with forgetting < 1 and a
    feature direction that is never excited, P grows like forgetting^{-t} (no safeguard here;
    use ``dvaw`` with ``hint="self"`` for the stabilised equivalent).

    Parameters
    ----------
    dim : int
        Number of features.
    forgetting : float, default=0.99
        Forgetting factor in (0, 1].
    delta : float, default=1.0
        Initial ridge > 0 (P_0 = I / delta).

    Attributes
    ----------
    P_ : ndarray of shape (1, dim, dim)
        Inverse of the discounted covariance.
    v_ : ndarray of shape (1, dim)
        Current estimate.
    Sigma_, theta_, ridge_, logdet_ : ndarray
        Discounted covariance, label sum, ridge level, ln det.
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = RLS(2, forgetting=0.95)
    >>> _ = learn_stream(model, linear_stream([1.0, -1.0], 400, then=(200, [-1.0, 2.0])))
    >>> print(model.weights.round(2))
    [-1.  2.]

    References
    ----------
    ``docs/algorithms/dvaw.md``.
    """

    kind: ClassVar[str] = "rls"
    forgetting: float
    delta: float
    _constraints: ClassVar[dict[str, Constraint]] = {
        "forgetting": Interval(0.0, 1.0, closed="right"),
        "delta": positive(),
    }

    def __init__(self, dim: int, *, forgetting: float = 0.99, delta: float = 1.0):
        self._init_params(dim, {"forgetting": forgetting, "delta": delta})
        self._gamma = np.array([float(forgetting)])
        self._log_gamma = np.log(self._gamma)
        set_stack_attrs(self, fresh_stack(1, self.dim, float(delta)))
        self.t_ = 0

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        if _accel.get() is not None:  # the compiled v.x, as learn reports it
            return Prediction(float(self._begin(x).mu[0]))
        return Prediction(float(self.v_[0] @ x))

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = _accel.get()
        if k is not None:  # begin and commit in one compiled call
            s, sc = step_compiled(k, self, x, float(y))
            y_hat = float(sc[5, 0])
            set_stack_attrs(self, s)
            self.t_ += 1
            err = y_hat - y
            return make_report(y_hat, err * err, {})
        b = self._begin(x)
        y_hat = float(b.mu[0])
        set_stack_attrs(self, self._commit(b, x, y))
        self.t_ += 1
        err = y_hat - y
        return make_report(y_hat, err * err, {})

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"forgetting": 0.9, "delta": 0.5}, {"forgetting": 1.0}]
