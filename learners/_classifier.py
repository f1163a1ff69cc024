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

Class probabilities (``predict_proba``, docs/probabilities.md): ``_predict_proba`` gives
``{-1: 1 - p, 1: p}`` with ``p = _proba_plus(x, m)``. A model with its own predictive
probability overrides ``_proba_plus``; the linear ones derive from :class:`ProbitCalibrated`,
an online probit calibration of a score updated in ``learn`` through the
``_calibrate(y, m, diagnostics)`` hook (a no-op otherwise): of the margin m, or for a
Gaussian over the weights (AROW, CW: :class:`GaussianCalibrated`) of the Gaussian probit's
argument m / sqrt(1 + x' Sigma x).

Step diagnostics common to every binary classifier: ``score`` (m), ``margin`` (y*m),
``hinge`` (max(0, 1 - y*m)), ``mistake`` (1.0 if y*m <= 0, Theorem 2's definition, which
also counts a tie m = 0 as a mistake) and ``update``. ``StepReport.loss`` is the 0-1 loss
of the label actually predicted.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from learners.base import (
    Learner,
    Prediction,
    StateSize,
    StepReport,
    make_report,
    numbers_real,
    readonly,
)

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


_SQRT2 = math.sqrt(2.0)
_SQRT2PI = math.sqrt(2.0 * math.pi)


def normal_cdf(z: float) -> float:
    """Phi(z), the standard normal CDF, accurate in both tails (through erfc)."""
    return 0.5 * math.erfc(-z / _SQRT2)


def gaussian_argument(m: float, v: float) -> float:
    """m / sqrt(1 + v), with v clamped at 0; inf / inf (an overflowed x' Sigma x) is NaN."""
    return m / math.sqrt(1.0 + max(0.0, v))


def gaussian_proba_plus(m: float, v: float) -> float:
    """P(y = +1) = Phi(m / sqrt(1 + v)) when the score w . x is N(m, v) under the weights'
    Gaussian and the label is sign(w . x + noise), noise N(0, 1) (docs/probabilities.md)."""
    return normal_cdf(m / math.sqrt(1.0 + v))


def binary_proba(p: float) -> dict[Any, float]:
    """``{-1: 1 - p, +1: p}``: the class probabilities of a binary classifier; a NaN ``p``
    (a model whose score overflowed) is 1/2."""
    if p != p:
        p = 0.5
    return {-1: 1.0 - p, 1: p}


#: scores are clipped to +-Z_MAX before calibrating: z^2 and the products of the update stay
#: finite (inputs reach 1e150), and Phi((a z + b) / sqrt(.)) has reached its limit there
Z_MAX = 1e100


def clip_score(z: float) -> float:
    """``z`` clipped to [-Z_MAX, Z_MAX] (NaN stays NaN)."""
    return Z_MAX if z > Z_MAX else -Z_MAX if z < -Z_MAX else z


_normal_cdf_array = np.frompyfunc(normal_cdf, 1, 1)
#: half-width (in standard deviations) and steps per smallest deviation of the quadrature
_QUAD_HALF_WIDTH = 8.5
_QUAD_STEPS = 4.0


def gaussian_argmax_proba(means: np.ndarray, variances: np.ndarray) -> np.ndarray:
    """P(class k has the largest score) for independent class scores N(m_k, v_k + 1/2):
    E_z prod_{j != k} Phi((m_k + s_k z - m_j) / s_j), z ~ N(0, 1), by the trapezoid rule on
    z in [-8.5, 8.5] with a step fine enough for the steepest factor (exponentially
    accurate for these smooth integrands), normalised to sum 1. Two classes give
    Phi((m_1 - m_0) / sqrt(1 + v_0 + v_1)), the binary :func:`gaussian_proba_plus`
    (docs/probabilities.md)."""
    means = np.clip(np.nan_to_num(means), -Z_MAX, Z_MAX)  # an overflowed score: no NaN out
    s = np.sqrt(np.clip(np.nan_to_num(variances), 0.0, Z_MAX) + 0.5)
    k = means.shape[0]
    out = np.empty(k)
    for i in range(k):
        others = np.arange(k) != i
        # a step fine for the Gaussian weight and for the steepest factor Phi(. / s_j)
        step = min(1.0, float(np.min(s[others])) / float(s[i])) / _QUAD_STEPS
        n = 2 * math.ceil(_QUAD_HALF_WIDTH / step) + 1
        z = np.linspace(-_QUAD_HALF_WIDTH, _QUAD_HALF_WIDTH, n)
        arg = (means[i] + s[i] * z[:, None] - means[None, others]) / s[None, others]
        integrand = np.exp(-0.5 * z * z) * np.prod(
            _normal_cdf_array(arg).astype(np.float64), axis=1
        )
        out[i] = float(np.sum(integrand) * (z[1] - z[0])) / _SQRT2PI
    return out / out.sum()


def inverse_mills(t: float) -> float:
    """phi(t) / Phi(t), with its asymptotic series where Phi(t) would underflow."""
    if t > -30.0:
        return math.exp(-0.5 * t * t) / _SQRT2PI / normal_cdf(t)
    u = 1.0 / (t * t)  # Phi(t) ~ phi(t) / (-t) (1 - 1/t^2 + 3/t^4)
    return -t / (1.0 - u + 3.0 * u * u)


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

    def _proba_plus(self, x: np.ndarray, m: float) -> float:
        """P(y = +1 | x) given the score ``m`` of ``x``; pure."""
        raise NotImplementedError

    def _calibrate(self, y: float, m: float, diagnostics: dict[str, float]) -> None:
        """Called by ``learn`` after the update with the label, the pre-update score and
        the step's diagnostics (no-op here)."""

    # ---- the contract ---------------------------------------------------------------------
    def _check_y(self, y: Any) -> Any:
        return to_pm1(y)

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        m = self._score(x)
        return Prediction(sign_label(m), {"margin": m})

    def _predict_proba(self, x: np.ndarray, hint: float | None) -> dict[Any, float]:
        return binary_proba(self._proba_plus(x, self._score(x)))

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        m = self._score(x)
        return self._finish_step(y, m, self._update(x, y, m))

    def _finish_step(self, y: Any, m: float, update: dict[str, float]) -> StepReport:
        """A step's bookkeeping once the model is updated: its report (``update``: the
        update's diagnostics), the calibration and the counters."""
        y_hat = sign_label(m)
        ym = y * m
        mistake = ym <= 0.0
        diagnostics = {
            "score": m,
            "margin": ym,
            "hinge": max(0.0, 1.0 - ym),
            "mistake": float(mistake),
            **update,
        }
        self._calibrate(y, m, diagnostics)
        self.t_ += 1
        self.n_mistakes_ += int(mistake)
        self.n_updates_ += int(diagnostics.get("update", 0.0) > 0.0)
        return make_report(y_hat, float(y_hat != y), diagnostics, {"margin": m})

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


class ProbitCalibrated(BinaryClassifier):
    """A :class:`BinaryClassifier` whose probabilities come from an online probit calibration
    of a score z (the margin m unless a subclass says otherwise): p(y = +1) = Phi(a z + b)
    averaged over (a, b) ~ N(mean, cov), i.e. Phi((a z + b) / sqrt(1 + (z, 1) cov (z, 1)')),
    a Bayesian probit regression on (z, 1) updated by assumed-density filtering on each
    labelled round's pre-update score (docs/probabilities.md). The prior a ~ N(1, 1),
    b ~ N(0, 1) starts at Phi(z / sqrt(2 + z^2)), never surer than Phi(1) = 0.84 before any
    label. State: ``calib_a_``, ``calib_b_`` (the mean) and ``calib_vaa_``, ``calib_vab_``,
    ``calib_vbb_`` (the covariance); a checkpoint without them loads with the prior."""

    def _init_params(self, dim: int, params: dict[str, Any]) -> None:
        super()._init_params(dim, params)
        self.calib_a_ = 1.0
        self.calib_b_ = 0.0
        self.calib_vaa_ = 1.0
        self.calib_vab_ = 0.0
        self.calib_vbb_ = 1.0

    def _calibration_input(self, x: np.ndarray, m: float) -> float:
        """The calibrated score z of ``x`` (its margin ``m`` here); pure."""
        return m

    def _learned_calibration_input(self, m: float, diagnostics: dict[str, float]) -> float:
        """z of a learned round, from its pre-update margin and the step's diagnostics."""
        return m

    def _proba_plus(self, x: np.ndarray, m: float) -> float:
        z = clip_score(self._calibration_input(x, m))
        mean = self.calib_a_ * z + self.calib_b_
        var = (self.calib_vaa_ * z + 2.0 * self.calib_vab_) * z + self.calib_vbb_
        return normal_cdf(mean / math.sqrt(1.0 + max(0.0, var)))

    def _calibrate(self, y: float, m: float, diagnostics: dict[str, float]) -> None:
        # ADF for a probit likelihood Phi(y (a z + b)): the Gaussian closest in KL to
        # prior x likelihood (the update of Bayesian online probit models)
        m = clip_score(self._learned_calibration_input(m, diagnostics))
        if m != m:
            return  # the model's score overflowed: nothing to learn from
        vaa, vab, vbb = self.calib_vaa_, self.calib_vab_, self.calib_vbb_
        sa, sb = vaa * m + vab, vab * m + vbb  # Sigma z
        s2 = 1.0 + max(0.0, sa * m + sb)  # 1 + z' Sigma z
        s = math.sqrt(s2)
        t = y * (self.calib_a_ * m + self.calib_b_) / s
        lam = inverse_mills(t)
        delta = min(1.0, max(0.0, lam * (lam + t)))  # in (0, 1): keeps Sigma positive
        step = y * lam / s
        self.calib_a_ += step * sa
        self.calib_b_ += step * sb
        shrink = delta / s2
        self.calib_vaa_ = vaa - shrink * sa * sa
        self.calib_vab_ = vab - shrink * sa * sb
        self.calib_vbb_ = vbb - shrink * sb * sb


class GaussianCalibrated(ProbitCalibrated):
    """:class:`ProbitCalibrated` for a Gaussian N(mu, Sigma) over the weights (AROW, CW): the
    score w . x is N(m, v), v = x' Sigma x, and with a unit probit noise p(+1) =
    Phi(m / sqrt(1 + v)); its argument z = m / sqrt(1 + v) is the calibrated score, so the
    prior a = 1, b = 0 is that formula, and the calibration learns the noise scale and
    offset the model's margin units leave open (docs/probabilities.md). Subclasses give
    ``_variance(x)`` and report the pre-update v as the ``variance`` diagnostic."""

    def _variance(self, x: np.ndarray) -> float:
        raise NotImplementedError

    def _calibration_input(self, x: np.ndarray, m: float) -> float:
        return gaussian_argument(m, self._variance(x))

    def _learned_calibration_input(self, m: float, diagnostics: dict[str, float]) -> float:
        return gaussian_argument(m, diagnostics["variance"])


class LinearClassifier(ProbitCalibrated):
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
