"""Shared base for online binary linear classifiers (labels -1/+1).

Stable API (other modules, e.g. quantifiers, build on it):

* :func:`to_pm1` maps an accepted label (-1/+1, 0/1, booleans) to ``-1.0``/``+1.0`` and raises
  ``ValueError`` on anything else;
* :func:`sign_label` is the tie rule: score ``m >= 0`` predicts ``+1`` (docs/algorithms/arow.md);
* :class:`BinaryClassifier` is a template: subclasses implement ``_score(x) -> float`` (the
  signed score ``m``) and ``_update(x, y, m) -> dict`` (the learning step, returning its
  diagnostics with ``"update"`` set to 1.0 when the state changed), and optionally the
  vectorised ``_scores_many(X)``. The base does label checking, the 0-1 loss, the
  ``Prediction`` (``value`` = -1/+1, ``scores = {"margin": m}``), the round / mistake /
  update counters and the public batch scorer :meth:`BinaryClassifier.decision_function`.

Step diagnostics common to every binary classifier: ``score`` (m), ``margin`` (y*m),
``hinge`` (max(0, 1 - y*m)), ``mistake`` (1.0 if y*m <= 0, Theorem 2's definition, which
also counts a tie m = 0 as a mistake) and ``update``. ``StepReport.loss`` is the 0-1 loss
of the label actually predicted.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from learners.base import Learner, Prediction, StateSize, StepReport, numbers_real, readonly

#: Largest ``dim`` for learners that keep a dense d x d matrix (docs/algorithms/arow.md).
FULL_MAX_DIM = 4096


def mean_and_covariance_size(dim: int, full: bool, k: int = 1) -> StateSize:
    """The bytes of k mean vectors (d each) with a full (d x d) or diagonal (d) covariance
    each: AROW (k classes), CW, the second-order perceptron, AROW regression."""
    per = "" if k == 1 else "k*"
    terms = [(8, f"{per}d^2", k * dim * dim), (8, f"{per}d", k * dim)] if full else []
    return StateSize.of(
        *(terms or [(16, f"{per}d", k * dim)]), where="" if k == 1 else f"k = {k} classes"
    )


def to_pm1(y: Any) -> float:
    """Map a binary label to ``-1.0``/``+1.0``: accepts -1/+1, 0/1 (0 -> -1) and booleans.

    Numbers may be ints or floats (``1.0``), numpy scalars included; anything else (strings,
    None, NaN, 2, 0.5) raises ``ValueError``.
    """
    if isinstance(y, bool | np.bool_):
        return 1.0 if y else -1.0
    if not isinstance(y, numbers_real()):
        raise ValueError(f"binary label must be -1/+1, 0/1 or a boolean, got {y!r}")
    v = float(y)  # type: ignore[arg-type]  # a real number (checked above)
    if v == 1.0:
        return 1.0
    if v in (-1.0, 0.0):
        return -1.0
    raise ValueError(f"binary label must be -1/+1, 0/1 or a boolean, got {y!r}")


def sign_label(m: float) -> int:
    """Predicted label for score ``m``; the tie ``m = 0`` predicts +1 (docs/algorithms/arow.md)."""
    return 1 if m >= 0.0 else -1


class BinaryClassifier(Learner):
    """Template for binary linear classifiers; see the module docstring.

    Attributes common to every subclass: ``t_`` (rounds learned), ``n_mistakes_`` (rounds
    with ``y*m <= 0``) and ``n_updates_`` (rounds that changed the model).
    """

    task: ClassVar[str] = "classification"
    #: The labels predictions use, in the order (negative, positive).
    classes_: ClassVar[tuple[int, int]] = (-1, 1)
    #: none of these has a bias, so the threshold cannot move: a service model gets an
    #: intercept column unless its spec says otherwise (benchmarks/README.md, "Defaults on
    #: real streams": +4 to +7 accuracy points on Phishing for every kind)
    preprocess_default: ClassVar[dict[str, Any] | None] = {"intercept": True}

    def _init_params(self, dim: int, params: dict[str, Any]) -> None:
        super()._init_params(dim, params)
        self.t_ = 0
        self.n_mistakes_ = 0
        self.n_updates_ = 0

    @staticmethod
    def _check_full_dim(kind: str, dim: int, full: bool) -> None:
        """Refuse a dense d x d state above :data:`FULL_MAX_DIM` (docs/algorithms/arow.md)."""
        if full and dim > FULL_MAX_DIM:
            raise ValueError(
                f"{kind}: parameter 'dim' must be at most {FULL_MAX_DIM} with a full"
                f" covariance (use diagonal), got {dim}"
            )

    # ---- hooks for subclasses -------------------------------------------------------------
    def _score(self, x: np.ndarray) -> float:
        raise NotImplementedError

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        raise NotImplementedError

    def _scores_many(self, X: np.ndarray) -> np.ndarray:
        return np.array([self._score(x) for x in X], dtype=np.float64)

    # ---- the contract ---------------------------------------------------------------------
    def _check_y(self, y: Any) -> Any:
        return to_pm1(y)

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        m = self._score(x)
        return Prediction(sign_label(m), {"margin": m})

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        m = self._score(x)
        y_hat = sign_label(m)
        ym = y * m
        mistake = ym <= 0.0
        diagnostics = {
            "score": m,
            "margin": ym,
            "hinge": max(0.0, 1.0 - ym),
            "mistake": float(mistake),
        }
        diagnostics.update(self._update(x, y, m))
        self.t_ += 1
        self.n_mistakes_ += int(mistake)
        self.n_updates_ += int(diagnostics.get("update", 0.0) > 0.0)
        return StepReport(
            prediction=y_hat,
            loss=float(y_hat != y),
            diagnostics=diagnostics,
            scores={"margin": m},
        )

    def decision_function(self, X: Any) -> np.ndarray:
        """Scores ``m`` of the current model for the rows of ``X`` (shape (n, dim)); pure.

        ``predict(x).value == (+1 if m >= 0 else -1)`` for each row.
        """
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim != 2 or arr.shape[1] != self.dim:
            raise ValueError(f"X must have shape (n, {self.dim}), got {tuple(arr.shape)}")
        if not np.all(np.isfinite(arr)):
            raise ValueError("X must contain only finite numbers (no NaN or inf)")
        return self._scores_many(arr)

    # ---- test hooks -----------------------------------------------------------------------
    @classmethod
    def _test_stream(cls, dim: int, n: int, seed: int) -> tuple[np.ndarray, list[Any]]:
        """Gaussian inputs, labels = sign of a random separator with 10% flipped."""
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, dim)) / math.sqrt(dim)
        w = rng.normal(size=dim)
        y = np.where(X @ w >= 0.0, 1, -1)
        flip = rng.random(n) < 0.1
        y[flip] = -y[flip]
        return X, [int(v) for v in y]

    @classmethod
    def _test_bad_labels(cls) -> list[Any]:
        return [float("nan"), float("inf"), "1", None, 2, 0.5, -2.0, [1]]


class LinearClassifier(BinaryClassifier):
    """A :class:`BinaryClassifier` whose learned state is one weight vector ``w_`` (zero at
    the start) and whose score is ``m = w . x`` (``perceptron``, ``pa-classifier``):
    subclasses implement ``_update``."""

    w_: np.ndarray

    def _init_params(self, dim: int, params: dict[str, Any]) -> None:
        super()._init_params(dim, params)
        self.w_ = np.zeros(self.dim)

    @property
    def weights(self) -> np.ndarray:
        return readonly(self.w_)

    def _score(self, x: np.ndarray) -> float:
        return float(self.w_ @ x)

    def _scores_many(self, X: np.ndarray) -> np.ndarray:
        return X @ self.w_


class MeanAndCovariance(BinaryClassifier):
    """A binary classifier whose state is a mean vector and a d x d matrix, or only its
    diagonal when the ``diagonal`` hyperparameter is set (``cw``, ``sop``): a full one is
    refused above :data:`FULL_MAX_DIM`, in ``__init__`` and in ``state_size`` alike."""

    diagonal: bool

    def _init_params(self, dim: int, params: dict[str, Any]) -> None:
        super()._init_params(dim, params)
        self._check_full_dim(self.kind, self.dim, not self.diagonal)

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        cls._check_full_dim(cls.kind, d, not p["diagonal"])  # __init__'s refusal
        return mean_and_covariance_size(d, not p["diagonal"])
