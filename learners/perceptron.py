"""The perceptron (Rosenblatt 1958): a reference binary classifier for the AROW benchmarks.

References
----------
Rosenblatt (1958). The perceptron. Psychological Review 65; ``docs/algorithms/arow.md``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from learners._classifier import LinearClassifier
from learners._constraints import Constraint


class Perceptron(LinearClassifier):
    """Perceptron without intercept: predict sign(w . x) (tie +1); on y w.x <= 0, w += y x.

    Parameters
    ----------
    dim : int
        Number of features. There are no hyperparameters.

    Attributes
    ----------
    w_ : ndarray of shape (dim,)
        Weights, start at zero.
    t_, n_mistakes_, n_updates_ : int
        Rounds learned, rounds with y w.x <= 0, rounds that updated (= mistakes).
    calib_a_, calib_b_, calib_vaa_, calib_vab_, calib_vbb_ : float
        The online probit calibration of the margin behind ``predict_proba``
        (docs/probabilities.md).

    Examples
    --------
    >>> import numpy as np
    >>> model = Perceptron(2)
    >>> _ = model.learn([1.0, 0.5], 0)  # 0 is mapped to -1: a mistake at w = 0
    >>> print(model.weights)
    [-1.  -0.5]
    >>> model.predict([2.0, 0.0]).value
    -1

    References
    ----------
    Rosenblatt (1958); ``docs/algorithms/arow.md``.
    """

    kind: ClassVar[str] = "perceptron"
    _constraints: ClassVar[dict[str, Constraint]] = {}

    def __init__(self, dim: int):
        self._init_params(dim, {})

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        if y * m > 0.0:
            return {"update": 0.0}
        self.w_ = self.w_ + y * x
        return {"update": 1.0}

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}]
