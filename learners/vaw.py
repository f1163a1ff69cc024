"""The Vovk-Azoury-Warmuth forecaster (Vovk 2001; Azoury & Warmuth 2001).

References
----------
``docs/algorithms/dvaw.md`` (Eq. 1); Jacobsen & Cutkosky (2024) §2.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._constraints import Constraint
from learners.base import Prediction, StepReport, make_report, positive
from learners.dvaw import OneExpert, fresh_stack, set_stack_attrs, step_compiled


class VAW(OneExpert):
    """Vovk-Azoury-Warmuth forecaster: online ridge that includes the current x_t.

    w_t = (lam I + sum_{s<=t} x_s x_s^T)^{-1} sum_{s<t} y_s x_s and y_hat = <x_t, w_t>
    (Eq. 1), computed in O(d^2) per round as mu_t / (1 + x^T A_{t-1}^{-1} x) (spec §2).

    Parameters
    ----------
    dim : int
        Number of features.
    lam : float, default=1.0
        Ridge regulariser lambda > 0.

    Attributes
    ----------
    P_ : ndarray of shape (1, dim, dim)
        (lam I + sum_{s<=t} x_s x_s^T)^{-1}.
    v_ : ndarray of shape (1, dim)
        The online ridge estimate P_ theta.
    Sigma_, theta_, ridge_, logdet_ : ndarray
        The covariance, label sum, ridge level and ln det of the covariance.
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = VAW(3)
    >>> _ = learn_stream(model, linear_stream([1.0, -2.0, 0.5], 500))
    >>> print(model.weights.round(2))
    [ 1.  -2.   0.5]

    References
    ----------
    Vovk (2001); Azoury & Warmuth (2001); ``docs/algorithms/dvaw.md``, Thm 2.1.
    """

    kind: ClassVar[str] = "vaw"
    lam: float
    _constraints: ClassVar[dict[str, Constraint]] = {"lam": positive()}

    def __init__(self, dim: int, *, lam: float = 1.0):
        self._init_params(dim, {"lam": lam})
        self._gamma = np.ones(1)
        self._log_gamma = np.zeros(1)
        set_stack_attrs(self, fresh_stack(1, self.dim, float(lam)))
        self.t_ = 0

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        b = self._begin(x)
        return Prediction(float(b.mu[0] * (1.0 - b.rho[0])))  # mu / (1 + q), spec §2

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = _accel.get()
        if k is not None:  # begin and commit in one compiled call
            s, sc = step_compiled(k, self, x, float(y))
            _, _, _, _, rho, mu, _ = sc[:, 0].tolist()
            y_hat = mu * (1.0 - rho)
            set_stack_attrs(self, s)
            self.t_ += 1
            err = y_hat - y
            return make_report(y_hat, err * err, {"leverage": rho})
        b = self._begin(x)
        y_hat = float(b.mu[0] * (1.0 - b.rho[0]))
        set_stack_attrs(self, self._commit(b, x, y))
        self.t_ += 1
        err = y_hat - y
        return make_report(y_hat, err * err, {"leverage": float(b.rho[0])})

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"lam": 0.3}]
