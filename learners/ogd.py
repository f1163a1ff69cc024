"""Online gradient descent on the squared loss (baseline of spec §7.2).

References
----------
Zinkevich (2003), Online Convex Programming and Generalized Infinitesimal Gradient Ascent;
``docs/algorithms/dvaw.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._constraints import Constraint, Options
from learners.base import (
    LinearRegressor,
    StepReport,
    make_report,
    positive,
)


class OGD(LinearRegressor):
    """Online gradient descent for linear regression: w <- w + eta_t (y - <w, x>) x, w_1 = 0.

    Parameters
    ----------
    dim : int
        Number of features.
    lr : float, default=0.01
        Step size eta (``"constant"``) or eta_0 (``"sqrt"``: eta_t = eta_0 / sqrt(t)), > 0.
    schedule : {"constant", "sqrt"}, default="constant"
        Step-size schedule.

    Attributes
    ----------
    w_ : ndarray of shape (dim,)
        Current weights.
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = OGD(3, lr=0.05)
    >>> _ = learn_stream(model, linear_stream([1.0, -2.0, 0.5], 2000))
    >>> print(model.weights.round(2))
    [ 1.  -2.   0.5]

    References
    ----------
    Zinkevich (2003); ``docs/algorithms/dvaw.md``.
    """

    kind: ClassVar[str] = "ogd"
    lr: float
    schedule: str
    _constraints: ClassVar[dict[str, Constraint]] = {
        "lr": positive(),
        "schedule": Options(("constant", "sqrt")),
    }

    def __init__(self, dim: int, *, lr: float = 0.01, schedule: str = "constant"):
        self._init_params(dim, {"lr": lr, "schedule": schedule})

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = _accel.get()
        if k is not None:
            w2 = np.empty(self.dim)
            self.t_ += 1
            y_hat, eta = k.ogd_step(
                self.w_, x, float(y), float(self.lr), self.schedule == "sqrt", self.t_, w2
            )
            self.w_ = w2
            err = y_hat - y
            return make_report(y_hat, err * err, {"lr": eta})
        y_hat = float(self.w_ @ x)
        self.t_ += 1
        eta = self.lr if self.schedule == "constant" else self.lr / math.sqrt(self.t_)
        self.w_ = self.w_ + eta * (y - y_hat) * x  # gradient step on (y - <w,x>)^2 / 2
        err = y_hat - y
        return StepReport(prediction=y_hat, loss=err * err, diagnostics={"lr": eta})

    def learn_many(self, X: Any, y: Any, *, hints: Any = None) -> Sequence[StepReport]:
        """``learn`` on each row in order; on the compiled path in one call (``ogd_many``:
        the compiled ``learn`` of each row, so the loop's bits)."""
        k = _accel.get()
        if k is None:
            return super().learn_many(X, y, hints=hints)
        rows, labels, _ = self._check_many(X, y, hints)
        if type(X) is np.ndarray and X.dtype == np.float64 and X.ndim == 2:
            M = X  # validated as one matrix by _check_many
        else:
            M = np.array(rows, dtype=np.float64).reshape(len(rows), self.dim)
        return self._learn_rows(k, M, labels)  # the kernel raises nothing mid-batch

    def _learn_rows(self, k: Any, M: np.ndarray, labels: list[Any]) -> list[StepReport]:
        """Rows ``M`` (validated) by the compiled kernel."""
        out = np.empty((len(labels), 2))
        w2 = np.empty(self.dim)
        y = np.array(labels, dtype=np.float64)
        k.ogd_many(self.w_, M, y, float(self.lr), self.schedule == "sqrt", self.t_, w2, out)
        self.w_ = w2
        self.t_ += len(labels)
        reports = []
        for (y_hat, eta), v in zip(out.tolist(), labels, strict=True):
            err = y_hat - v
            reports.append(make_report(y_hat, err * err, {"lr": eta}))
        return reports

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"lr": 0.1, "schedule": "sqrt"}]
