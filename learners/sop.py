"""Second-order perceptron (Cesa-Bianchi, Conconi, Gentile 2005), full and diagonal.

A baseline of the AROW paper's experiments; see
``docs/algorithms/arow.md``.

References
----------
Cesa-Bianchi, Conconi, Gentile (2005). A Second-Order Perceptron Algorithm. SIAM J. Comput. 34.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from learners._classifier import MeanAndCovariance, ProbitCalibrated
from learners._constraints import Boolean, Constraint, Interval


class SecondOrderPerceptron(ProbitCalibrated, MeanAndCovariance):
    """Second-order perceptron: predicts sign(v' (S + x x')^{-1} x), updates on mistakes.

    S = a I + sum of x x' over past mistakes, v = sum of y x over past mistakes. The current
    x enters the matrix before predicting (unlike AROW). The full form keeps S^{-1} by
    Sherman-Morrison, so (S + x x')^{-1} x = S^{-1} x / (1 + x' S^{-1} x). The diagonal form
    (AROW paper, footnote 2) keeps the diagonal of S only.

    Parameters
    ----------
    dim : int
        Number of features (at most 4096 unless ``diagonal``).
    a : float, default=1.0
        Initial diagonal of S, in (0, inf).
    diagonal : bool, default=False
        Keep S diagonal: predict sign(sum_j v_j x_j / (S_jj + x_j^2)).

    Attributes
    ----------
    v_ : ndarray of shape (dim,)
        Sum of y x over mistakes.
    S_inv_ : ndarray of shape (dim, dim)
        S^{-1} (full form only).
    S_ : ndarray of shape (dim,)
        The diagonal of S (diagonal form only).
    t_, n_mistakes_, n_updates_ : int
        Rounds learned, rounds with y m <= 0, rounds that updated (= mistakes).
    calib_a_, calib_b_, calib_vaa_, calib_vab_, calib_vbb_ : float
        The online probit calibration behind ``predict_proba`` (S is a second-moment
        matrix of the mistakes, not a posterior covariance; docs/probabilities.md).

    Examples
    --------
    >>> from learners.streams import linear_classes
    >>> model = SecondOrderPerceptron(5, a=1.0)
    >>> _ = model.learn_many(*linear_classes([1.0, -2.0, 0.5, 0.0, 1.0], 2000))
    >>> print(model.n_mistakes_ < 100)
    True

    References
    ----------
    Cesa-Bianchi, Conconi, Gentile (2005); ``docs/algorithms/arow.md``.
    """

    kind: ClassVar[str] = "sop"
    _constraints: ClassVar[dict[str, Constraint]] = {
        "a": Interval(0.0, math.inf, closed="neither"),
        "diagonal": Boolean(),
    }
    a: float

    def __init__(self, dim: int, *, a: float = 1.0, diagonal: bool = False):
        self._init_params(dim, {"a": a, "diagonal": diagonal})
        self.v_ = np.zeros(self.dim)
        if diagonal:
            self.S_ = np.full(self.dim, float(a))
        else:
            self.S_inv_ = np.eye(self.dim) / float(a)

    @property
    def weights(self) -> np.ndarray:
        """S^{-1} v: the weights used for an input orthogonal to nothing seen (a copy)."""
        return self.v_ / self.S_ if self.diagonal else self.S_inv_ @ self.v_

    def _score(self, x: np.ndarray) -> float:
        if self.diagonal:
            return float(np.sum(self.v_ * x / (self.S_ + x * x)))
        ax = self.S_inv_ @ x
        return float(self.v_ @ ax) / (1.0 + float(x @ ax))

    def _scores_many(self, X: np.ndarray) -> np.ndarray:
        if self.diagonal:
            return np.sum(self.v_ * X / (self.S_ + X * X), axis=1)
        AX = X @ self.S_inv_  # S^{-1} is symmetric
        return (AX @ self.v_) / (1.0 + np.sum(AX * X, axis=1))

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        if y * m > 0.0:
            return {"update": 0.0}
        self.v_ = self.v_ + y * x
        if self.diagonal:
            self.S_ = self.S_ + x * x
        else:
            # S += x x'  <=>  S^{-1} -= S^{-1} x x' S^{-1} / (1 + x' S^{-1} x)
            ax = self.S_inv_ @ x
            self.S_inv_ = self.S_inv_ - np.outer(ax, ax) / (1.0 + float(x @ ax))
        return {"update": 1.0}

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"diagonal": True, "a": 0.5}]
