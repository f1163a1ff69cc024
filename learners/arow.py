"""AROW: adaptive regularization of weight vectors (Crammer, Kulesza, Dredze, NIPS 2009).

Kinds ``arow`` (binary, full or diagonal covariance; multi-class with ``classes``) and
``arow-regression`` (the squared-loss form, i.e. recursive least squares / online ridge).

References
----------
Crammer, Kulesza, Dredze (2009). Adaptive Regularization of Weight Vectors. NIPS 22.
Algorithm page: ``docs/algorithms/arow.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._classifier import (
    BinaryClassifier,
    GaussianCalibrated,
    gaussian_argmax_proba,
    mean_and_covariance_size,
    sign_label,
)
from learners._constraints import Boolean, Constraint, Interval, NoneOr, Options, Predicate
from learners.base import (
    Learner,
    Prediction,
    StateSize,
    StepReport,
    make_report,
    numbers_real,
    readonly,
)

_FLOAT64 = np.dtype(np.float64)


def _batch_matrix(X: Any, rows: list[np.ndarray], dim: int) -> np.ndarray:
    """The checked rows as one float64 matrix (``X`` itself when it is one)."""
    if type(X) is np.ndarray and X.dtype is _FLOAT64 and X.ndim == 2:
        return X  # validated as one matrix by _check_many
    return np.array(rows, dtype=np.float64).reshape(len(rows), dim)


def _diagonal_batch(
    model: Any, X: Any, y: Sequence[Any], hints: Any, width: int, step: Any
) -> tuple[list[Any], list[list[float]]]:
    """A diagonal AROW's compiled ``learn_many``: check the batch, run ``step(mu, Sigma,
    M, ys, out)`` (one kernel call over the rows, in place on copies, ``width`` outputs per
    row), then keep the new state. Returns the checked labels and ``out`` as rows."""
    rows, labels, _ = model._check_many(X, y, hints)
    M = _batch_matrix(X, rows, model.dim)
    mu, S, out = model.mu_.copy(), model.Sigma_.copy(), np.empty((len(rows), width))
    step(mu, S, M, np.array(labels, dtype=np.float64), out)
    model.mu_, model.Sigma_ = mu, S
    return labels, out.tolist()


#: Accepted values of ``diagonal``: False (full), True (= "cov", the better one, §5), or a mode.
DIAGONAL_OPTIONS = (False, True, "cov", "prec")


def covariance_mode(diagonal: bool | str) -> str:
    """``"full"``, ``"cov"`` or ``"prec"`` for a ``diagonal`` hyperparameter value."""
    if diagonal is False:
        return "full"
    return "cov" if diagonal is True else str(diagonal)


def initial_covariance(dim: int, mode: str) -> np.ndarray:
    """Sigma_0 = I: a (dim, dim) matrix for ``"full"``, its diagonal (ones) otherwise."""
    return np.eye(dim) if mode == "full" else np.ones(dim)


def covariance_times(cov: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Sigma x for a full (d, d) ``cov`` or a diagonal one stored as its (d,) diagonal."""
    return cov @ x if cov.ndim == 2 else cov * x


def shrink_covariance(
    cov: np.ndarray,
    x: np.ndarray,
    sx: np.ndarray,
    v: float,
    r: float,
    mode: str,
    v_other: float = 0.0,
) -> np.ndarray:
    """The AROW confidence step from ``cov`` = Sigma_{t-1}, with ``sx`` = Sigma_{t-1} x and
    ``v`` = x' Sigma_{t-1} x; returns Sigma_t (a new array).

    * ``"full"``: eq. (9), Sigma - beta (Sigma x)(Sigma x)', beta = 1 / (v + v_other + r).
    * ``"cov"``: the diagonal of eq. (9), s_j - beta (s_j x_j)^2 (docs/algorithms/arow.md).
    * ``"prec"``: the diagonal of eq. (8), 1/s_j += x_j^2 / r (docs/algorithms/arow.md).

    ``v_other`` is the other block's variance in the multi-class step (§7), 0 for binary.
    Only the nonzero coordinates of ``x`` are touched in the diagonal modes.
    """
    denom = v + v_other + r
    if mode == "full":
        beta = 1.0 / denom
        k = _accel.get()
        if k is not None:  # the same bits in one compiled pass (learners/_kernels.py)
            out = np.empty(cov.shape)
            k.arow_shrink(cov, sx, beta, out)
            return out
        return cov - beta * np.outer(sx, sx)
    k = _accel.get()
    if k is not None:  # the same per-coordinate steps, one compiled pass (learners/_kernels.py)
        out = np.empty(cov.shape)
        k.arow_diag_shrink(cov, x, v, v_other, r, mode == "prec", out)
        return out
    out = cov.copy()
    J = np.flatnonzero(x)
    if J.size == 0:
        return out
    if mode == "prec":
        out[J] = 1.0 / (1.0 / cov[J] + x[J] * x[J] / r)
        return out
    # "cov": s_j (1 - beta s_j x_j^2) = s_j (v - q_j + v_other + r) / denom, q_j = s_j x_j^2.
    # Summing the other coordinates' share directly for the largest q_j avoids the cancellation
    # (and a zero or negative s_j) when q_j dominates v (spec §14.14).
    q = sx[J] * x[J]
    rest = v - q
    top = int(np.argmax(q))
    q_top, q[top] = q[top], 0.0
    rest[top] = float(np.sum(q))  # the others' share, summed directly
    q[top] = q_top
    out[J] = cov[J] * ((rest + v_other + r) / denom)
    return out


def _valid_classes(value: Any) -> bool:
    if not isinstance(value, list | tuple) or len(value) < 2:
        return False
    ok = all(isinstance(c, str) or (isinstance(c, int) and not isinstance(c, bool)) for c in value)
    return ok and len({(type(c), c) for c in value}) == len(value)


class AROW(GaussianCalibrated):
    """AROW classifier: Gaussian N(mu, Sigma) over weights, soft margin and confidence terms.

    Binary (default): predicts sign(mu . x) (tie -> +1); on a round with y (mu . x) < 1 it
    applies eqs. (7) and (9) (Fig. 1 of the paper), otherwise nothing changes. With
    ``classes`` it is the multi-class extension (one Gaussian per class, the
    top-scoring wrong class as the single competitor; an extension, not in the paper).

    Parameters
    ----------
    dim : int
        Number of features (at most 4096 with a full covariance).
    r : float, default=1.0
        Regularisation, in (0, inf): lambda_1 = lambda_2 = 1 / (2r) in eq. (1). Small r is
        aggressive (hard margin as r -> 0); large r is conservative.
    diagonal : {False, True, "cov", "prec"}, default=False
        False keeps the full covariance (the paper's algorithm). Otherwise Sigma is diagonal
        (O(d) per round): ``"cov"`` takes the diagonal of eq. (9), ``"prec"`` the
        diagonal of eq. (8); True means ``"cov"``, which the spec found much more accurate.
    classes : list of int or str, optional
        The class labels, for the multi-class extension (§7). None means binary, labels
        -1/+1 (0/1 and booleans accepted and mapped).
    update_covariance : bool, default=True
        False freezes Sigma at I, which turns AROW into PA-II with C = 1/(2r) (§11); for
        experiments and tests.

    Attributes
    ----------
    mu_ : ndarray of shape (dim,), or (n_classes, dim) with ``classes``
        Mean weight vector(s), start at zero.
    Sigma_ : ndarray of shape (dim, dim) or (dim,), or with a leading (n_classes,) axis
        Covariance(s), start at I; for a diagonal mode only the diagonal is stored.
    t_, n_mistakes_, n_updates_ : int
        Rounds learned, rounds with y m <= 0, rounds that updated (y m < 1).
    calib_a_, calib_b_, calib_vaa_, calib_vab_, calib_vbb_ : float
        Binary: the online probit calibration of z = m / sqrt(1 + x' Sigma x) behind
        ``predict_proba`` (docs/probabilities.md); unused with ``classes``, whose
        probabilities are those of the class Gaussians themselves.

    Notes
    -----
    Step diagnostics add ``variance`` (v = x' Sigma x), ``alpha``, ``beta``,
    ``sigma_trace`` and ``sigma_min_diag`` to the binary ones. With ``classes``, ``margin``
    is s_y - s_c against the top wrong class, ``Prediction.scores`` maps ``str(class)`` to
    its score, and ``decision_function`` returns shape (n, n_classes).

    Examples
    --------
    >>> import numpy as np
    >>> from learners.streams import linear_classes
    >>> rng = np.random.default_rng(0)
    >>> X, y = linear_classes([1.0, -2.0, 0.5, 0.0, 1.0], 2000, rng)
    >>> noisy = np.where(rng.random(2000) < 0.1, -y, y)  # 10% label noise
    >>> model = AROW(5, r=1.0)
    >>> reports = model.learn_many(X, noisy)
    >>> X_test, y_test = linear_classes([1.0, -2.0, 0.5, 0.0, 1.0], 1000, rng)
    >>> err = np.mean(np.where(model.decision_function(X_test) >= 0, 1, -1) != y_test)
    >>> print(bool(err < 0.05))
    True
    >>> model.predict(X_test[0]).value == int(y_test[0])
    True

    References
    ----------
    Crammer, Kulesza, Dredze (2009), NIPS 22, eqs. (7)-(9), Fig. 1; ``docs/algorithms/arow.md``.
    """

    kind: ClassVar[str] = "arow"
    _constraints: ClassVar[dict[str, Constraint]] = {
        "r": Interval(0.0, math.inf, closed="neither"),
        "diagonal": Options(DIAGONAL_OPTIONS),
        "classes": NoneOr(
            Predicate(
                _valid_classes,
                "a list of at least 2 distinct ints or strings",
                {
                    "type": "array",
                    "items": {"type": ["integer", "string"]},
                    "minItems": 2,
                    "uniqueItems": True,
                },
            )
        ),
        "update_covariance": Boolean(),
    }
    r: float
    diagonal: bool | str
    classes: list[int | str] | None
    update_covariance: bool

    def __init__(
        self,
        dim: int,
        *,
        r: float = 1.0,
        diagonal: bool | str = False,
        classes: list[int | str] | None = None,
        update_covariance: bool = True,
    ):
        self._init_from(locals())
        self._mode = covariance_mode(diagonal)
        self._check_full_dim(self.kind, self.dim, self._mode == "full")
        cov = initial_covariance(self.dim, self._mode)
        if classes is None:
            self._index: dict[Any, int] | None = None
            self.mu_ = np.zeros(self.dim)
            self.Sigma_ = cov
        else:
            self._index = {c: i for i, c in enumerate(classes)}
            k = len(classes)
            self.mu_ = np.zeros((k, self.dim))
            self.Sigma_ = np.repeat(cov[np.newaxis], k, axis=0)

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        full = covariance_mode(p["diagonal"]) == "full"
        cls._check_full_dim(cls.kind, d, full)  # __init__'s refusal, before any figure
        return mean_and_covariance_size(d, full, 1 if p["classes"] is None else len(p["classes"]))

    @property
    def weights(self) -> np.ndarray:
        """The mean weights ``mu_`` (read-only view)."""
        return readonly(self.mu_)

    @property
    def covariance(self) -> np.ndarray:
        """Sigma as a dense matrix (binary) or stack of matrices (multi-class); a copy."""
        if self._mode == "full":
            return self.Sigma_.copy()
        if self.Sigma_.ndim == 1:
            return np.diag(self.Sigma_)
        return np.stack([np.diag(s) for s in self.Sigma_])

    def score_variance(self, x: Any) -> float:
        """v = x' Sigma x, the variance of the binary score under N(mu, Sigma) (§4.1)."""
        if self._index is not None:
            raise ValueError("score_variance is defined for the binary learner only")
        xv = self._check_x(x)
        return max(0.0, float(xv @ covariance_times(self.Sigma_, xv)))

    # ---- binary (§4, §5) --------------------------------------------------------------------
    def _score(self, x: np.ndarray) -> float:
        k = self._diagonal_kernels()
        if k is not None:  # learn's m, summed as the compiled step sums it
            return float(k.dot(self.mu_, x))
        return float(self.mu_ @ x)

    def _scores_many(self, X: np.ndarray) -> np.ndarray:
        k = self._diagonal_kernels()
        if k is not None and X.dtype == np.float64:
            out = np.empty(X.shape[0])
            k.dot_rows(X, self.mu_, out)  # each row's dot, as _score
            return out
        return X @ self.mu_.T

    def _variance(self, x: np.ndarray) -> float:
        k = self._diagonal_kernels()
        if k is not None:  # the compiled step's x' Sigma x (clamped at 0, as gaussian_argument)
            return float(k.diag_variance(self.Sigma_, x))
        return float(x @ covariance_times(self.Sigma_, x))  # the score's, under N(mu, Sigma)

    def _predict_proba(self, x: np.ndarray, hint: float | None) -> dict[Any, float]:
        if self._index is None:
            return super()._predict_proba(x, hint)
        assert self.classes is not None
        v = np.array([float(x @ covariance_times(cov, x)) for cov in self.Sigma_])
        p = gaussian_argmax_proba(self.mu_ @ x, v)
        return {c: float(q) for c, q in zip(self.classes, p, strict=True)}

    def _update(self, x: np.ndarray, y: float, m: float) -> dict[str, float]:
        sx = covariance_times(self.Sigma_, x)  # from the OLD Sigma (§15.6)
        v = max(0.0, float(x @ sx))  # clamp round-off (§4.2)
        alpha = beta = 0.0
        updated = y * m < 1.0  # Fig. 1: strict, so margin exactly 1 is passive
        if updated:
            beta = 1.0 / (v + self.r)
            alpha = max(0.0, 1.0 - y * m) * beta  # eq. (7)
            self.mu_ = self.mu_ + (alpha * y) * sx
            if self.update_covariance:
                self.Sigma_ = shrink_covariance(self.Sigma_, x, sx, v, self.r, self._mode)
        return {
            "update": float(updated),
            "variance": v,
            "alpha": alpha,
            "beta": beta,
            **self._sigma_gauges(self.Sigma_),
        }

    def learn_many(
        self, X: Any, y: Sequence[Any], *, hints: Sequence[float | None] | None = None
    ) -> Sequence[StepReport]:
        """``learn`` on each row in order; a binary diagonal AROW on the compiled path runs
        the batch's steps in one call (``arow_diag_many``: ``arow_diag_row`` per row, the
        compiled ``learn``'s kernel, so the loop bit for bit), then the calibration and
        reports row by row."""
        k = self._diagonal_kernels()
        if k is None:
            return super().learn_many(X, y, hints=hints)
        prec, shrink = self._mode == "prec", self.update_covariance
        labels, out = _diagonal_batch(
            self, X, y, hints, 7,
            lambda mu, S, M, ys, o: k.arow_diag_many(mu, S, M, ys, self.r, prec, shrink, o),
        )  # fmt: skip
        report, mu, S = self._diagonal_report, self.mu_, self.Sigma_
        return [report(mu, S, yv, o) for yv, o in zip(labels, out, strict=True)]

    def _diagonal_report(
        self, mu: np.ndarray, S: np.ndarray, y: float, out: list[float]
    ) -> StepReport:
        """BinaryClassifier._learn's bookkeeping for a compiled diagonal step: ``out`` =
        (m, v, alpha, beta, updated, sigma_trace, sigma_min_diag) of arow_diag_row."""
        m, v, alpha, beta, updated, trace, low = out
        self.mu_, self.Sigma_ = mu, S
        update = {"update": updated, "variance": v, "alpha": alpha, "beta": beta}
        return self._finish_step(y, m, {**update, "sigma_trace": trace, "sigma_min_diag": low})

    def _sigma_gauges(self, cov: np.ndarray) -> dict[str, float]:
        diag = cov.diagonal(axis1=-2, axis2=-1) if self._mode == "full" else cov
        return {"sigma_trace": float(diag.sum()), "sigma_min_diag": float(diag.min())}

    # ---- multi-class (§7, an extension) -------------------------------------------------
    def _check_y(self, y: Any) -> Any:
        if self._index is None:
            return super()._check_y(y)
        key: Any = None
        if isinstance(y, str):
            key = y
        elif isinstance(y, numbers_real()) and not isinstance(y, bool | np.bool_):
            fy = float(y)  # type: ignore[arg-type]  # a real number (checked above)
            if math.isfinite(fy) and fy.is_integer():
                key = int(fy)
        if key is None or key not in self._index:
            raise ValueError(f"label must be one of {self.classes}, got {y!r}")
        return self._index[key]

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        if self._index is None:
            return super()._predict(x, hint)
        assert self.classes is not None
        s = self.mu_ @ x
        return Prediction(self.classes[int(np.argmax(s))], self._class_scores(s))

    def _class_scores(self, s: np.ndarray) -> dict[str, float]:
        assert self.classes is not None
        return {str(c): float(v) for c, v in zip(self.classes, s, strict=True)}

    def _diagonal_kernels(self) -> Any:
        """The compiled kernels for a binary diagonal AROW, else None (numpy code)."""
        if self._index is not None or self._mode == "full":
            return None
        return _accel.get()

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        if self._index is None:
            k = self._diagonal_kernels()
            if k is not None:
                mu, S, out = self.mu_.copy(), self.Sigma_.copy(), np.empty(7)
                k.arow_diag_row(
                    mu, S, x, y, self.r, self._mode == "prec", self.update_covariance, out
                )
                return self._diagonal_report(mu, S, y, out.tolist())
            return super()._learn(x, y, hint)
        assert self.classes is not None
        s = self.mu_ @ x
        k_hat = int(np.argmax(s))
        rivals = s.copy()
        rivals[y] = -np.inf
        c = int(np.argmax(rivals))  # the single top-1 competitor
        m = float(s[y] - s[c])
        sx_y = covariance_times(self.Sigma_[y], x)
        sx_c = covariance_times(self.Sigma_[c], x)
        v_y = max(0.0, float(x @ sx_y))
        v_c = max(0.0, float(x @ sx_c))
        v = v_y + v_c
        alpha = beta = 0.0
        updated = m < 1.0
        if updated:
            beta = 1.0 / (v + self.r)
            alpha = (1.0 - m) * beta
            self.mu_[y] = self.mu_[y] + alpha * sx_y
            self.mu_[c] = self.mu_[c] - alpha * sx_c
            if self.update_covariance:
                # block-diagonal Sigma: cross-class blocks dropped (§7); beta uses the joint v
                self.Sigma_[y] = self._shrink_block(self.Sigma_[y], x, sx_y, v_y, v_c)
                self.Sigma_[c] = self._shrink_block(self.Sigma_[c], x, sx_c, v_c, v_y)
        mistake = m <= 0.0
        self.t_ += 1
        self.n_mistakes_ += int(mistake)
        self.n_updates_ += int(updated)
        scores = self._class_scores(s)
        return StepReport(
            prediction=self.classes[k_hat],
            loss=float(k_hat != y),
            diagnostics={
                "margin": m,
                "hinge": max(0.0, 1.0 - m),
                "mistake": float(mistake),
                "update": float(updated),
                "variance": v,
                "alpha": alpha,
                "beta": beta,
                **self._sigma_gauges(self.Sigma_),
            },
            scores=scores,
        )

    def _shrink_block(
        self, cov: np.ndarray, x: np.ndarray, sx: np.ndarray, v: float, v_other: float
    ) -> np.ndarray:
        return shrink_covariance(cov, x, sx, v, self.r, self._mode, v_other)

    # ---- test hooks -------------------------------------------------------------------------
    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [
            {},
            {"diagonal": "cov", "r": 0.1},
            {"diagonal": "prec"},
            {"diagonal": True},
            {"update_covariance": False},
            {"classes": [-1, 1]},
            {"classes": [1, -1], "diagonal": "prec", "r": 0.5},
        ]


class AROWRegressor(Learner):
    """AROW with the squared loss: recursive least squares / online ridge with parameter r.

    Predicts y_hat = mu . x with the pre-update mean, then (docs/algorithms/arow.md)
    mu += (y - y_hat) beta Sigma x and Sigma -= beta Sigma x x' Sigma, beta = 1/(x' Sigma x + r).
    So mu_t = (r I + sum x x')^{-1} sum y x: ridge on everything seen so far (not the
    Vovk-Azoury-Warmuth forecaster, which also adds x_t x_t' before predicting).

    Parameters
    ----------
    dim : int
        Number of features (at most 4096 with a full covariance).
    r : float, default=1.0
        Ridge parameter / noise variance, in (0, inf).
    diagonal : {False, True, "cov", "prec"}, default=False
        Covariance form, as for :class:`AROW`.
    epsilon : float, default=0.0
        With epsilon > 0, the passive epsilon-insensitive variant (an extension, §6): update
        only when |y - y_hat| > epsilon, by the excess. 0 is the paper's RLS (every round).

    Attributes
    ----------
    mu_ : ndarray of shape (dim,)
        Mean weights, start at zero.
    Sigma_ : ndarray of shape (dim, dim) or (dim,)
        Covariance (start at I); the diagonal only for a diagonal mode.
    t_ : int
        Rounds learned.

    Examples
    --------
    >>> from learners.streams import learn_stream, linear_stream
    >>> model = AROWRegressor(3, r=1.0)
    >>> _ = learn_stream(model, linear_stream([1.0, -2.0, 0.5], 500, noise=0.1))
    >>> print(model.weights.round(1))
    [ 1.  -2.   0.5]

    References
    ----------
    Crammer, Kulesza, Dredze (2009), NIPS 22, footnote 1 and Sec. 6; ``docs/algorithms/arow.md``.
    """

    kind: ClassVar[str] = "arow-regression"
    _constraints: ClassVar[dict[str, Constraint]] = {
        "r": Interval(0.0, math.inf, closed="neither"),
        "diagonal": Options(DIAGONAL_OPTIONS),
        "epsilon": Interval(0.0, math.inf, closed="left"),
    }
    r: float
    diagonal: bool | str
    epsilon: float

    def __init__(
        self, dim: int, *, r: float = 1.0, diagonal: bool | str = False, epsilon: float = 0.0
    ):
        self._init_params(dim, {"r": r, "diagonal": diagonal, "epsilon": epsilon})
        self._mode = covariance_mode(diagonal)
        BinaryClassifier._check_full_dim(self.kind, self.dim, self._mode == "full")
        self.mu_ = np.zeros(self.dim)
        self.Sigma_ = initial_covariance(self.dim, self._mode)
        self.t_ = 0

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        full = covariance_mode(p["diagonal"]) == "full"
        BinaryClassifier._check_full_dim(cls.kind, d, full)  # __init__'s refusal
        return mean_and_covariance_size(d, full)

    @property
    def weights(self) -> np.ndarray:
        return readonly(self.mu_)

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        k = self._diagonal_kernels()
        if k is not None:  # learn's y_hat, summed as the compiled step sums it
            return Prediction(float(k.dot(self.mu_, x)))
        return Prediction(float(self.mu_ @ x))

    def _diagonal_kernels(self) -> Any:
        return None if self._mode == "full" else _accel.get()

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        k = self._diagonal_kernels()
        if k is not None:  # one compiled step (learners/_kernels.py arow_reg_diag_row)
            mu, S, out = self.mu_.copy(), self.Sigma_.copy(), np.empty(4)
            k.arow_reg_diag_row(mu, S, x, y, self.r, self.epsilon, self._mode == "prec", out)
            self.mu_, self.Sigma_ = mu, S
            self.t_ += 1
            return self._diagonal_report(*out.tolist())
        y_hat = float(self.mu_ @ x)
        e = y - y_hat
        sx = covariance_times(self.Sigma_, x)
        v = max(0.0, float(x @ sx))
        updated = abs(e) > self.epsilon if self.epsilon > 0.0 else True
        if updated:
            delta = math.copysign(abs(e) - self.epsilon, e) if self.epsilon > 0.0 else e
            beta = 1.0 / (v + self.r)
            self.mu_ = self.mu_ + (delta * beta) * sx  # §6: mu += (y - y_hat) beta Sigma x
            self.Sigma_ = shrink_covariance(self.Sigma_, x, sx, v, self.r, self._mode)
        self.t_ += 1
        return StepReport(
            prediction=y_hat,
            loss=e * e,
            diagnostics={
                "variance": v,
                "predictive_variance": v + self.r,
                "update": float(updated),
            },
        )

    def learn_many(
        self, X: Any, y: Sequence[Any], *, hints: Sequence[float | None] | None = None
    ) -> Sequence[StepReport]:
        """``learn`` on each row in order; a diagonal form on the compiled path runs the
        batch in one call (``arow_reg_diag_many``: the compiled ``learn``'s row kernel per
        row, so the loop bit for bit)."""
        k = self._diagonal_kernels()
        if k is None:
            return super().learn_many(X, y, hints=hints)
        eps, prec = self.epsilon, self._mode == "prec"
        labels, out = _diagonal_batch(
            self, X, y, hints, 4,
            lambda mu, S, M, ys, o: k.arow_reg_diag_many(mu, S, M, ys, self.r, eps, prec, o),
        )  # fmt: skip
        self.t_ += len(labels)
        report = self._diagonal_report
        return [report(*o) for o in out]

    def _diagonal_report(self, y_hat: float, e: float, v: float, updated: float) -> StepReport:
        """_learn's report from a compiled step's (y_hat, e, v, updated)."""
        return make_report(
            y_hat,
            e * e,
            {"variance": v, "predictive_variance": v + self.r, "update": updated},
        )

    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        return [{}, {"diagonal": "cov", "r": 0.5}, {"diagonal": "prec", "epsilon": 0.1}]


__all__ = [
    "AROW",
    "AROWRegressor",
    "covariance_mode",
    "covariance_times",
    "initial_covariance",
    "shrink_covariance",
    "sign_label",
]
