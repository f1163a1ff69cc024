"""Passive-aggressive binary classification: PA, PA-I, PA-II (Crammer et al. 2006).

The AROW paper's PA baseline; see ``docs/algorithms/arow.md``. The regression PA lives in
``learners/pa.py``.

References
----------
Crammer, Dekel, Keshet, Shalev-Shwartz, Singer (2006). Online Passive-Aggressive Algorithms.
JMLR 7.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from learners._classifier import LinearClassifier
from learners._constraints import Constraint, Interval, Options


def pa_classification_step(hinge: float, sq_norm: float, variant: str, C: float) -> float:
    """tau of PA / PA-I / PA-II for hinge loss ``hinge`` and ||x||^2 = ``sq_norm``.

    PA: hinge/||x||^2; PA-I: min(C, hinge/||x||^2); PA-II: hinge/(||x||^2 + 1/(2C)).
    Passive (0) when the hinge is 0, and for PA / PA-I when x = 0 (nothing would move).
    """
    if hinge <= 0.0:
        return 0.0
    if variant == "pa2":
        return hinge / (sq_norm + 1.0 / (2.0 * C))
    if sq_norm <= 0.0:
        return 0.0
    tau = hinge / sq_norm
    return min(C, tau) if variant == "pa1" else tau


class PAClassifier(LinearClassifier):
    """Passive-aggressive linear classifier with the hinge loss max(0, 1 - y w.x).

    Parameters
    ----------
    dim : int
        Number of features.
    variant : {"pa", "pa1", "pa2"}, default="pa2"
        PA (hard), PA-I (step clipped at C) or PA-II (squared slack). PA-II is the default:
        it is AROW with the covariance frozen at I, r = 1/(2C) (docs/algorithms/arow.md).
    C : float, default=1.0
        Aggressiveness, in (0, inf); unused by plain PA.

    Attributes
    ----------
    w_ : ndarray of shape (dim,)
        Weights, start at zero.
    t_, n_mistakes_, n_updates_ : int
        Rounds learned, rounds with y w.x <= 0, rounds that updated (hinge > 0).
    calib_a_, calib_b_, calib_vaa_, calib_vab_, calib_vbb_ : float
        The online probit calibration of the margin behind ``predict_proba``
        (docs/probabilities.md).

    Examples
    --------
    >>> import numpy as np
    >>> model = PAClassifier(2, variant="pa")
    >>> report = model.learn([1.0, 1.0], 1)
    >>> print(report.diagnostics["tau"], model.weights)
    0.5 [0.5 0.5]
    >>> print(model.predict([1.0, 1.0]).scores)
    {'margin': 1.0}

    References
    ----------
    Crammer et al. (2006), JMLR 7; ``docs/algorithms/arow.md``.
    """

    kind: ClassVar[str] = "pa-classifier"
    _constraints: ClassVar[dict[str, Constraint]] = {
        "variant": Options(("pa", "pa1", "pa2")),
        "C": Interval(0.0, math.inf, closed="neither"),
    }
    variant: str
    C: float

    def __init__(self, dim: int, *, variant: str = "pa2", C: float = 1.0):
        self._init_params(dim, {"variant": variant, "C": C})

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        tau = pa_classification_step(max(0.0, 1.0 - y * m), float(x @ x), self.variant, self.C)
        if tau > 0.0:
            self.w_ = self.w_ + (tau * y) * x  # w += tau y x
        return {"update": float(tau > 0.0), "tau": tau}

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"variant": "pa"}, {"variant": "pa1", "C": 0.1}]
