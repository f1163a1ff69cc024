"""Confidence-weighted (CW) classification, the "variance" form (Dredze, Crammer, Pereira 2008).

The baseline AROW is compared against (AROW paper, footnote 3). Its update is
summarised in ``docs/algorithms/arow.md``.

References
----------
Dredze, Crammer, Pereira (2008). Confidence-Weighted Linear Classification. ICML.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, ClassVar

import numpy as np

from learners._classifier import GaussianCalibrated, MeanAndCovariance
from learners._constraints import Boolean, Constraint, Interval
from learners.base import readonly


def cw_variance_step(M: float, V: float, phi: float) -> float:
    """alpha = max(0, gamma) of the CW variance update for signed margin ``M`` = y mu.x and
    variance ``V`` = x' Sigma x (docs/algorithms/arow.md); 0 when ``V`` = 0 or the constraint holds.

    gamma is the positive root of 2 phi V g^2 + (1 + 2 phi M) g + (M - phi V)/V = 0, which
    makes y mu_t.x = phi x' Sigma_t x tight.
    """
    if V <= 0.0 or M >= phi * V:
        return 0.0
    b = 1.0 + 2.0 * phi * M
    # (1 + 2 phi M)^2 - 8 phi (M - phi V) rewritten as a sum of squares: never negative.
    root = math.sqrt((1.0 - 2.0 * phi * M) ** 2 + 8.0 * phi * phi * V)
    if b >= 0.0:  # rationalised form: no cancellation between -b and the root
        gamma = 2.0 * (phi * V - M) / (V * (b + root))
    else:
        gamma = (-b + root) / (4.0 * phi * V)
    return max(0.0, gamma)


class CWClassifier(GaussianCalibrated, MeanAndCovariance):
    """Confidence-weighted linear classifier, variance form, full or diagonal covariance.

    Keeps N(mu, Sigma) over weights (Sigma_0 = I) and predicts sign(mu . x). When the
    margin-variance constraint y mu.x >= phi x' Sigma x is violated (phi = Phi^{-1}(eta)),
    it moves to the closest Gaussian (in KL) that satisfies it with equality.

    Parameters
    ----------
    dim : int
        Number of features (at most 4096 with a full covariance).
    eta : float, default=0.9
        Required probability of a correct prediction, in (0.5, 1).
    diagonal : bool, default=False
        Keep only the diagonal of Sigma (inverse-diagonal update, as in the CW paper).

    Attributes
    ----------
    mu_ : ndarray of shape (dim,)
        Mean weights, start at zero.
    Sigma_ : ndarray of shape (dim, dim) or (dim,)
        Covariance (start at I); only its diagonal when ``diagonal``.
    t_, n_mistakes_, n_updates_ : int
        Rounds learned, rounds with y m <= 0, rounds that updated.
    calib_a_, calib_b_, calib_vaa_, calib_vab_, calib_vbb_ : float
        The online probit calibration of z = m / sqrt(1 + x' Sigma x) behind
        ``predict_proba`` (docs/probabilities.md).

    Examples
    --------
    >>> import numpy as np
    >>> from learners.streams import linear_classes
    >>> rng = np.random.default_rng(0)
    >>> model = CWClassifier(5, eta=0.9)
    >>> _ = model.learn_many(*linear_classes([1.0, -2.0, 0.5, 0.0, 1.0], 2000, rng))
    >>> X_test, y_test = linear_classes([1.0, -2.0, 0.5, 0.0, 1.0], 1000, rng)
    >>> err = np.mean(np.where(model.decision_function(X_test) >= 0, 1, -1) != y_test)
    >>> print(bool(err < 0.03))
    True

    References
    ----------
    Dredze, Crammer, Pereira (2008), ICML; AROW paper footnote 3; ``docs/algorithms/arow.md``.
    """

    kind: ClassVar[str] = "cw"
    _constraints: ClassVar[dict[str, Constraint]] = {
        "eta": Interval(0.5, 1.0, closed="neither"),
        "diagonal": Boolean(),
    }
    eta: float

    def __init__(self, dim: int, *, eta: float = 0.9, diagonal: bool = False):
        self._init_params(dim, {"eta": eta, "diagonal": diagonal})
        self._phi = NormalDist().inv_cdf(float(eta))
        self.mu_ = np.zeros(self.dim)
        self.Sigma_ = np.ones(self.dim) if diagonal else np.eye(self.dim)

    @property
    def weights(self) -> np.ndarray:
        return readonly(self.mu_)

    def _score(self, x: np.ndarray) -> float:
        return float(self.mu_ @ x)

    def _scores_many(self, X: np.ndarray) -> np.ndarray:
        return X @ self.mu_

    def _variance(self, x: np.ndarray) -> float:
        sx = self.Sigma_ * x if self.diagonal else self.Sigma_ @ x
        return float(x @ sx)  # the score's, under N(mu, Sigma)

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        phi = self._phi
        sx = self.Sigma_ * x if self.diagonal else self.Sigma_ @ x
        V = max(0.0, float(x @ sx))
        alpha = cw_variance_step(y * m, V, phi)
        if alpha > 0.0:
            self.mu_ = self.mu_ + (alpha * y) * sx  # mu_t = mu + alpha y Sigma x
            if self.diagonal:
                # (Sigma_t^{-1})_jj = (Sigma^{-1})_jj + 2 alpha phi x_j^2, nonzero x_j only
                s = self.Sigma_.copy()
                J = np.flatnonzero(x)
                s[J] = 1.0 / (1.0 / s[J] + 2.0 * alpha * phi * x[J] * x[J])
                self.Sigma_ = s
            else:
                # Sigma_t^{-1} = Sigma^{-1} + 2 alpha phi x x' (Woodbury)
                c = 2.0 * alpha * phi / (1.0 + 2.0 * alpha * phi * V)
                self.Sigma_ = self.Sigma_ - c * np.outer(sx, sx)
        return {"update": float(alpha > 0.0), "variance": V, "alpha": alpha}

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"diagonal": True, "eta": 0.7}]
