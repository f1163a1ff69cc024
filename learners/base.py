"""The learner contract (docs/design.md, "Learner contract").

Every online learner derives from :class:`Learner` and implements two hooks:

* ``_predict(x, hint) -> Prediction``: no state change;
* ``_learn(x, y, hint) -> StepReport``: predict with the current state, score, update.

The public ``predict``/``learn`` validate their input first (dimension, finiteness, label), so a
bad event raises ``ValueError`` before any state is touched.

Hyperparameters are exactly the keyword-only ``__init__`` arguments, stored under the same
names; learned state lives in attributes ending in ``_`` (scikit-learn convention). So
``state()`` is mechanical: the params (as JSON) plus every trailing-underscore attribute, and
``from_state`` rebuilds the learner through ``__init__`` (one code path for construction and
resumption) and then restores the learned attributes.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from learners import _accel
from learners._constraints import Constraint, Interval, validate
from learners._errstate import errstate_check

StateValue = np.ndarray | float | int | str
State = dict[str, StateValue]

#: kind -> learner class; filled by ``Learner.__init_subclass__``.
REGISTRY: dict[str, type[Learner]] = {}

_FLOAT64 = np.dtype(np.float64)
_vdot = np.vdot
_isfinite = math.isfinite
_new = object.__new__

#: True when numpy's errstate in force ignores underflow (numpy's default). Then a dot
#: product ``x @ x`` with a finite result reports nothing to numpy (only underflow could
#: occur in it), so a bit-identical ``np.vdot(x, x)`` already computed (the same BLAS dot)
#: can stand in for it without losing a warning or an exception.
quiet_underflow = errstate_check(lambda d: d.get("under") == "ignore")


#: Names that ``state()`` uses for its own bookkeeping.
_RESERVED = ("kind", "dim", "params")


class Unanswerable(ValueError):
    """A learner cannot answer for this (valid) input in its present state: a transductive
    learner asked about a vector outside its registered block. The request's doing, not a
    bug: the service answers it as the client's error."""


class BatchInterrupted(ValueError):
    """``learn_many`` stopped at row ``index`` after its batch passed validation: the rows
    before it are learned (their reports are ``reports``), that row and the rest are not.
    The cause (a ``ValueError`` the step raised) is ``__cause__``; ``learn`` on the same row
    alone would have raised it. A batch that fails validation raises a plain ``ValueError``
    and changes nothing."""

    def __init__(self, index: int, reports: list[StepReport], cause: ValueError) -> None:
        super().__init__(f"row {index}: {cause}")
        self.index = index
        self.reports = reports


@dataclass(frozen=True)
class Prediction:
    """A point prediction.

    ``value`` is a float for regressors and the class label for classifiers; classifiers
    also give ``scores`` (the margin for binary learners, one score per class otherwise).
    """

    value: Any
    scores: dict[str, float] | None = None


@dataclass(frozen=True)
class StepReport:
    """What one ``learn`` step did: the prediction made before the update, its loss, and
    learner-specific diagnostics (a flat ``dict[str, float]``).

    ``loss`` is the squared error ``(prediction - y) ** 2`` for regressors and the 0-1 loss
    (1.0 on a mistake) for classifiers, so the service can aggregate it without knowing the
    learner; other losses (hinge, epsilon-insensitive) go into ``diagnostics``.
    """

    prediction: Any
    loss: float
    diagnostics: dict[str, float] = field(default_factory=dict)
    scores: dict[str, float] | None = None


#: ``_check_labels``' one-pass type test (a frozenset's issuperset iterates in C)
_FLOAT_ONLY = frozenset({float})


def make_report(
    prediction: Any,
    loss: float,
    diagnostics: dict[str, float],
    scores: dict[str, float] | None = None,
) -> StepReport:
    """``StepReport(prediction, loss, diagnostics, scores)`` without the frozen dataclass's
    ``__init__`` (one ``object.__setattr__`` per field, ~1 us of a ~3 us batched step): the
    same fields in the same order, so an equal object; for hot batch loops."""
    report = object.__new__(StepReport)
    report.__dict__.update(prediction=prediction, loss=loss, diagnostics=diagnostics, scores=scores)
    return report


class StepReports(Sequence[StepReport]):
    """A batch's reports held as columns (``learn_many`` of a compiled step): item ``i``
    is the ``StepReport`` the loop's ``learn`` returns for row ``i`` (equal field by field),
    built only when asked for; a consumer of a whole batch (the service's running
    statistics) reads ``predictions`` and ``losses`` (Python floats, the reports' own
    values) without building any. ``diagnostic_names``: the keys every report's
    ``diagnostics`` has."""

    __slots__ = ("predictions", "losses", "diagnostic_names", "_row")

    def __init__(
        self,
        predictions: list[float],
        losses: list[float],
        row: Any,
        diagnostic_names: frozenset[str],
    ) -> None:
        self.predictions = predictions
        self.losses = losses
        self.diagnostic_names = diagnostic_names
        self._row = row  # i -> the StepReport of row i

    def __len__(self) -> int:
        return len(self.predictions)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self.predictions)
        if not -n <= i < n:
            raise IndexError("report index out of range")
        return self._row(i + n if i < 0 else i)

    def __iter__(self) -> Any:
        return map(self._row, range(len(self.predictions)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __add__(self, other: Sequence[StepReport]) -> list[StepReport]:
        return [*self, *other]

    def __radd__(self, other: Sequence[StepReport]) -> list[StepReport]:
        return [*other, *self]

    def __repr__(self) -> str:
        return f"StepReports({list(self)!r})"


@dataclass(frozen=True)
class StateSize:
    """An upper bound of the bytes of a learner's learned arrays (the numpy arrays of
    ``state()``) and the formula it comes from, e.g. ``"16*d^2 + 16*d + 16 bytes"``.
    Scalars and strings in the state (counters, a generator's seed) are not counted."""

    bytes: int
    formula: str

    @classmethod
    def of(cls, *terms: tuple[int, str, int], where: str = "") -> StateSize:
        """The sum of ``coef * value`` over ``(coef, symbol, value)`` terms, written
        ``"coef*symbol + ... bytes"``; ``where`` gives the symbols other than d their
        values, e.g. ``"G = 21 discounts"``."""
        total = sum(coef * value for coef, _, value in terms)
        text = " + ".join(f"{coef}*{sym}" if sym else str(coef) for coef, sym, _ in terms)
        return cls(int(total), f"{text or 0} bytes" + (f" ({where})" if where else ""))


class Learner:
    """Base class of every online learner; see the module docstring."""

    kind: ClassVar[str] = ""
    #: ``"regression"`` or ``"classification"``; the service picks metrics by it.
    task: ClassVar[str] = "regression"
    #: hyperparameter name -> constraint, checked in ``__init__``.
    _constraints: ClassVar[dict[str, Constraint]] = {}
    #: the largest dimension a learner accepts (guards memory: some keep d x d matrices).
    max_dim: ClassVar[int] = 100_000
    #: preprocessing step -> why this learner refuses it (``learners/preprocess.py``).
    preprocess_refused: ClassVar[dict[str, str]] = {}
    #: the ``preprocess`` a model of this kind gets when its spec omits it (the service
    #: applies it at creation; ``learners.build`` never does, so papers' setups stay bare).
    preprocess_default: ClassVar[dict[str, Any] | None] = None

    dim: int

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("kind"):
            if cls.kind in REGISTRY and REGISTRY[cls.kind].__qualname__ != cls.__qualname__:
                raise TypeError(f"learner kind {cls.kind!r} registered twice")
            REGISTRY[cls.kind] = cls

    # ---- construction --------------------------------------------------------------------
    def __init__(self, dim: int, **params: Any) -> None:
        # Subclasses define keyword-only hyperparameters and call ``_init_params``.
        self._init_params(dim, params)

    def _init_params(self, dim: int, params: dict[str, Any]) -> None:
        """Validate ``dim`` and the hyperparameters, then store them under their own names.

        Subclasses call ``self._init_params(dim, {name: value, ...})`` (or
        ``self._init_from(locals())``) first in ``__init__``.
        """
        self._check_dim(dim)
        validate(self.kind, params, self._constraints)
        self.dim = int(dim)
        for name, value in params.items():
            setattr(self, name, value)

    def _init_from(self, scope: Mapping[str, Any]) -> None:
        """``_init_params`` with ``dim`` and the hyperparameters (the signature's keyword-only
        names, in its order) taken from ``scope``: ``__init__``'s ``locals()``, called first
        thing, so a long signature is not spelled out again as a dict."""
        self._init_params(scope["dim"], {name: scope[name] for name in self.param_names()})

    @classmethod
    def _check_dim(cls, dim: Any) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer):
            raise ValueError(f"{cls.kind}: parameter 'dim' must be an integer, got {dim!r}")
        if not 1 <= int(dim) <= cls.max_dim:
            raise ValueError(
                f"{cls.kind}: parameter 'dim' must be an integer in [1, {cls.max_dim}], got {dim!r}"
            )

    @classmethod
    def param_names(cls) -> list[str]:
        return list(cls._param_defaults())

    @classmethod
    def _param_defaults(cls) -> dict[str, Any]:
        sig = inspect.signature(cls.__init__)
        return {p.name: p.default for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}

    @classmethod
    def params_schema(cls) -> dict[str, Any]:
        """The JSON Schema of this kind's hyperparameters, made from the same declarations
        ``__init__`` checks (``_constraints`` and the signature's defaults), for the
        service's OpenAPI document: a property each, its default and the constraint's
        words as its description; no other names."""
        props: dict[str, Any] = {}
        for name, default in cls._param_defaults().items():
            constraint = cls._constraints.get(name)
            prop = constraint.json_schema() if constraint is not None else {}
            if constraint is not None:
                prop["description"] = f"must be {constraint.describe()}"
            if isinstance(default, str | int | float | bool | type(None)):
                prop["default"] = default
            props[name] = prop
        return {"type": "object", "properties": props, "additionalProperties": False}

    @classmethod
    def _check_param_names(cls, params: Mapping[str, Any]) -> None:
        unknown = sorted(set(params) - set(cls.param_names()))
        if unknown:
            raise ValueError(
                f"{cls.kind}: unknown parameter(s) {', '.join(map(repr, unknown))};"
                f" valid: {', '.join(cls.param_names()) or 'none'}"
            )

    # ---- memory, declared before anything is allocated -----------------------------------
    @classmethod
    def state_size(cls, dim: int, params: Mapping[str, Any] | None = None) -> StateSize:
        """An upper bound of the bytes of the arrays ``cls(dim, **params).state()`` holds,
        at any time, computed without building the learner (so a server can refuse a model
        over its memory budget before allocating it). A spec ``__init__`` would refuse for
        its dim or a hyperparameter raises the same ``ValueError`` here."""
        return cls._state_size(*cls._checked_spec(dim, params))

    @classmethod
    def _state_size(cls, d: int, p: dict[str, Any]) -> StateSize:
        """The declaration for a checked spec (``p`` has every hyperparameter). The default
        is one weight vector ``w_``; a learner with other learned arrays overrides it."""
        return StateSize.of((8, "d", d))

    @classmethod
    def _checked_spec(
        cls, dim: Any, params: Mapping[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        """``dim`` and every hyperparameter (defaults filled in), checked in the order and
        with the messages of ``learners.build`` and ``_init_params``."""
        given = dict(params or {})
        cls._check_param_names(given)
        cls._check_dim(dim)
        full = {name: given.get(name, default) for name, default in cls._param_defaults().items()}
        validate(cls.kind, full, cls._constraints)
        return int(dim), full

    def get_params(self) -> dict[str, Any]:
        """The hyperparameters, as passed to ``__init__`` (JSON-compatible values)."""
        return {name: getattr(self, name) for name in self.param_names()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({self.dim}{', ' if args else ''}{args})"

    # ---- input validation ----------------------------------------------------------------
    def _check_x(self, x: Any) -> np.ndarray:
        # Fast path: a float64 vector of the right size is returned as is (as np.asarray
        # would), no conversion. A finite x.x proves every element finite (a NaN or inf
        # makes it NaN or inf); only when it is not does the element-wise check decide.
        # (np.vdot: one BLAS pass that reports no overflow to numpy's errstate.)
        if type(x) is np.ndarray and x.dtype is _FLOAT64 and x.ndim == 1 and x.shape[0] == self.dim:
            if not _isfinite(_vdot(x, x)) and not np.isfinite(x).all():
                raise ValueError("x must contain only finite numbers (no NaN or inf)")
            return x
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError(f"x must be a vector of numbers: {exc}") from None
        if arr.ndim != 1 or arr.shape[0] != self.dim:
            raise ValueError(f"x must have dimension {self.dim}, got shape {tuple(arr.shape)}")
        if not np.all(np.isfinite(arr)):
            raise ValueError("x must contain only finite numbers (no NaN or inf)")
        return arr

    def _check_y(self, y: Any) -> Any:
        """Validate a label; regressors take a finite float. Classifiers override."""
        return finite_real(y, "y", "a real number")

    @staticmethod
    def _check_hint(hint: Any) -> float | None:
        return None if hint is None else finite_real(hint, "hint", "a real number or null")

    # ---- the contract --------------------------------------------------------------------
    def predict(self, x: Any, *, hint: float | None = None) -> Prediction:
        """Predict for ``x`` with the current state; changes nothing."""
        return self._predict(self._check_x(x), self._check_hint(hint))

    def predict_many(
        self, X: Any, *, hints: Sequence[float | None] | None = None
    ) -> list[Prediction]:
        """``predict`` on each row: the same predictions, with the rows validated as one
        matrix (``learn_many``'s check); a bad row raises before any prediction."""
        rows = self._check_rows(X)
        hs = [None] * len(rows) if hints is None else [self._check_hint(h) for h in hints]
        if len(rows) != len(hs):
            raise ValueError("X and hints must have the same length")
        predict = self._predict
        return [predict(x, h) for x, h in zip(rows, hs, strict=True)]

    def predict_proba(self, x: Any, *, hint: float | None = None) -> dict[Any, float]:
        """Classifiers: the probability of each class for ``x`` (river's
        ``predict_proba_one``), keyed by the labels ``predict`` answers, summing to 1; changes
        nothing (docs/probabilities.md). A regressor raises ``TypeError``."""
        self._require_classifier()
        return self._predict_proba(self._check_x(x), self._check_hint(hint))

    def predict_proba_many(
        self, X: Any, *, hints: Sequence[float | None] | None = None
    ) -> list[dict[Any, float]]:
        """``predict_proba`` on each row (the same dicts), the rows validated as one matrix
        as in ``predict_many``; a bad row raises before any probability is computed."""
        self._require_classifier()
        rows = self._check_rows(X)
        hs: list[float | None] = (
            [None] * len(rows) if hints is None else [self._check_hint(h) for h in hints]
        )
        if len(rows) != len(hs):
            raise ValueError("X and hints must have the same length")
        return self._predict_proba_rows(rows, hs)

    def _require_classifier(self) -> None:
        if self.task != "classification":
            raise TypeError(f"{self.kind} is a regressor: it gives no class probabilities")

    def _predict_proba(self, x: np.ndarray, hint: float | None) -> dict[Any, float]:
        raise NotImplementedError

    def _predict_proba_rows(
        self, rows: list[np.ndarray], hints: list[float | None]
    ) -> list[dict[Any, float]]:
        """``_predict_proba`` on checked rows; a learner with a per-batch cost (a refit)
        overrides it to pay that cost once."""
        proba = self._predict_proba
        return [proba(x, h) for x, h in zip(rows, hints, strict=True)]

    def learn(self, x: Any, y: Any, *, hint: float | None = None) -> StepReport:
        """One round of the online protocol: predict, score against ``y``, update."""
        xv = self._check_x(x)
        yv = self._check_y(y)
        return self._learn(xv, yv, self._check_hint(hint))

    def learn_many(
        self, X: Any, y: Sequence[Any], *, hints: Sequence[float | None] | None = None
    ) -> Sequence[StepReport]:
        """``learn`` on each row in order (sequential semantics, identical to a loop).

        Rows are validated all together first, so one bad row rejects the whole batch
        and leaves the state untouched. A step that fails after that raises
        :class:`BatchInterrupted`, which says how many rows were learned.
        """
        rows, labels, hs = self._check_many(X, y, hints)
        reports: list[StepReport] = []
        append, learn = reports.append, self._learn
        try:
            for x, v, h in zip(rows, labels, hs, strict=True):
                append(learn(x, v, h))
        except ValueError as exc:
            raise BatchInterrupted(len(reports), reports, exc) from exc
        return reports

    def _check_many(
        self, X: Any, y: Sequence[Any], hints: Sequence[float | None] | None
    ) -> tuple[list[np.ndarray], list[Any], list[float | None]]:
        """``learn_many``'s validation: rows, labels, hints, then their lengths (a bad row
        rejects the batch before any state changes). Subclasses' batch loops reuse it."""
        rows = self._check_rows(X)
        labels = self._check_labels(y)
        hs: list[float | None] = (
            [None] * len(rows) if hints is None else [self._check_hint(h) for h in hints]
        )
        if not len(rows) == len(labels) == len(hs):
            raise ValueError("X, y and hints must have the same length")
        return rows, labels, hs

    def _check_labels(self, y: Sequence[Any]) -> list[Any]:
        """``[self._check_y(v) for v in y]``; for the base (regression) check, a float64
        vector or a list/tuple of plain floats is checked in one go (same values: Python
        floats), anything else label by label."""
        if type(self)._check_y is Learner._check_y:
            if type(y) is np.ndarray and y.dtype is _FLOAT64 and y.ndim == 1:
                if np.isfinite(y).all():
                    return y.tolist()
            elif type(y) in (list, tuple) and _FLOAT_ONLY.issuperset(map(type, y)):
                if math.isfinite(sum(y)):  # finite sum => every label finite
                    return list(y)
        return [self._check_y(v) for v in y]

    def _check_rows(self, X: Any) -> list[np.ndarray]:
        """``[self._check_x(x) for x in X]``, with the same arrays and errors, checked as one
        matrix where that gives the same row arrays: a float64 ndarray (its rows are views,
        as iterating it gives), another ndarray or a list/tuple of non-array rows (fresh
        C-contiguous rows, as the per-row conversion makes). Anything else, or a batch the
        one-matrix check rejects, takes the per-row path, which raises the same error as
        before for the first bad row."""
        arr = None
        if type(self)._check_x is not Learner._check_x:
            pass  # a subclass validates rows its own way
        elif type(X) is np.ndarray:
            if X.dtype is _FLOAT64:
                arr = X
            elif X.ndim == 2 and X.dtype.kind in "biuf" and X.dtype != _FLOAT64:
                arr = np.array(X, dtype=np.float64, order="C")
        elif type(X) in (list, tuple) and not any(isinstance(r, np.ndarray) for r in X):
            try:
                arr = np.array(X, dtype=np.float64, order="C")
            except (TypeError, ValueError, OverflowError):
                arr = None
        if arr is not None and arr.ndim == 2 and arr.shape[1] == self.dim:
            if np.isfinite(arr).all():
                return list(arr)
        return [self._check_x(x) for x in X]

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        raise NotImplementedError

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        raise NotImplementedError

    # ---- state ---------------------------------------------------------------------------
    def state(self) -> State:
        """Everything needed to resume: kind, dim, params (JSON) and learned attributes.

        Arrays are copies, so the snapshot is independent of the live learner.
        """
        out: State = {
            "kind": self.kind,
            "dim": self.dim,
            "params": json.dumps(self.get_params(), sort_keys=True),
        }
        for name, value in vars(self).items():
            if not name.endswith("_") or name.startswith("_"):
                continue
            out[name] = _snapshot_value(name, value)
        return out

    @classmethod
    def from_state(cls, state: State) -> Learner:
        """Rebuild a learner from ``state()``; it continues bit for bit identically."""
        kind = state.get("kind")
        target = REGISTRY.get(str(kind)) if cls is Learner else cls
        if target is None or target.kind != kind:
            raise ValueError(f"state is for kind {kind!r}, not {cls.kind or 'a known kind'!r}")
        params = json.loads(str(state["params"]))
        learner = target(int(state["dim"]), **params)
        for name, value in state.items():
            if name in _RESERVED:
                continue
            if not name.endswith("_"):
                raise ValueError(f"unexpected field {name!r} in {kind} state")
            setattr(learner, name, value.copy() if isinstance(value, np.ndarray) else value)
        learner._after_restore()
        return learner

    def _after_restore(self) -> None:
        """Hook to rebuild derived caches after ``from_state`` (none by default)."""

    # ---- test hooks (River's ``_unit_test_params``) --------------------------------------
    @classmethod
    def _test_params(cls) -> list[dict[str, Any]]:
        """Small configurations the contract test runs (at least the defaults)."""
        return [{}]

    @classmethod
    def _test_stream(cls, dim: int, n: int, seed: int) -> tuple[np.ndarray, list[Any]]:
        """A seeded stream of ``n`` events suitable for this learner."""
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, dim)) / np.sqrt(dim)
        w = rng.normal(size=dim)
        y = X @ w + 0.1 * rng.normal(size=n)
        return X, [float(v) for v in y]

    @classmethod
    def _test_bad_labels(cls) -> list[Any]:
        """Labels ``learn`` must reject with ``ValueError``."""
        return [float("nan"), float("inf"), "1.0", None]

    def _test_prepare(self, X: np.ndarray) -> None:
        """Called by the contract test before streaming ``X`` (e.g. to register a block)."""


class LinearRegressor(Learner):
    """A regressor whose learned state is one weight vector ``w_`` (zero at the start) and a
    round counter ``t_``, and whose prediction is ``w . x`` (``ogd``, ``pa``): subclasses
    implement ``_learn``."""

    w_: np.ndarray
    t_: int

    def _init_params(self, dim: int, params: dict[str, Any]) -> None:
        super()._init_params(dim, params)
        self.w_ = np.zeros(self.dim)
        self.t_ = 0

    @property
    def weights(self) -> np.ndarray:
        return readonly(self.w_)

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        k = _accel.get()
        if k is not None:  # the compiled w.x, as learn reports it
            return Prediction(k.dot(self.w_, x))
        return Prediction(float(self.w_ @ x))

    def predict_values(
        self, X: Any, *, hints: Sequence[float | None] | None = None
    ) -> np.ndarray | None:
        """``predict_many``'s values as one float64 array, the same floats, when the compiled
        path serves ``X`` (below); None otherwise. For callers that need the values only
        (the API's compact answer): no ``Prediction`` per row."""
        k = _accel.get()
        if (
            k is None
            or type(self)._predict is not LinearRegressor._predict
            or type(self).predict_many is not LinearRegressor.predict_many
            or type(X) is not np.ndarray
            or X.dtype is not _FLOAT64
            or X.ndim != 2
            or X.shape[1] != self.dim
            or not X.flags.c_contiguous
            or not np.isfinite(X).all()
        ):
            return None
        if hints is not None:  # the base's checks, in its order (the rows are valid)
            hs = [self._check_hint(h) for h in hints]
            if len(hs) != X.shape[0]:
                raise ValueError("X and hints must have the same length")
        out = np.empty(X.shape[0])
        k.dot_rows(X, self.w_, out)
        return out

    def predict_many(
        self, X: Any, *, hints: Sequence[float | None] | None = None
    ) -> list[Prediction]:
        """``predict`` on each row. On the compiled path a finite C-ordered float64 matrix
        takes one kernel call (``dot_rows``: every row's w.x with ``dot``'s products in
        ``dot``'s order, so the same floats as the loop); anything else, and the numpy
        path (whose per-row BLAS dot a matrix product need not match), is the loop."""
        out = self.predict_values(X, hints=hints)
        if out is None:
            return super().predict_many(X, hints=hints)
        preds = []
        for v in out.tolist():  # Prediction(v) without the frozen dataclass's __init__
            p = _new(Prediction)
            p.__dict__.update(value=v, scores=None)
            preds.append(p)
        return preds


def finite_real(value: Any, name: str, expected: str) -> float:
    """``value`` as a finite float; else ``ValueError`` saying that ``name`` must be
    ``expected`` (bools are not numbers here), is too large for a float, or is not finite."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"{name} must be {expected}, got {value!r}")
    try:
        f = float(value)
    except OverflowError:
        raise ValueError(f"{name} is too large for a float") from None
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return f


def readonly(arr: np.ndarray) -> np.ndarray:
    """A read-only view of a learned array (what the ``weights`` properties return)."""
    view = arr.view()
    view.flags.writeable = False
    return view


def numbers_real() -> tuple[type, ...]:
    return (int, float, np.integer, np.floating)


def _snapshot_value(name: str, value: Any) -> StateValue:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"learned attribute {name!r} has unsupported type {type(value).__name__}")


def positive(name_high: float = math.inf) -> Interval:
    """Shorthand for a strictly positive real (0, high]."""
    return Interval(0.0, name_high, closed="right")
