"""Preprocessing inside the model: online standardisation, an intercept column, clipping.

``learners.build(kind, dim, preprocess={...}, **params)`` wraps the learner of ``kind`` in a
:class:`Preprocessed`, which maps each raw ``x`` (dimension ``dim``) to the inner learner's
input, in this order:

1. ``standardize``: ``(x - mean) / sd`` per feature, with the running mean and population
   standard deviation (Welford) of the ``x`` learned *before* this event; a feature whose sd
   is 0 (or before the first event) maps to 0, as river's ``StandardScaler`` does;
2. ``clip``: each value clipped to ``[-clip, clip]`` (after standardisation when both);
3. ``intercept``: a constant 1 appended, so the inner learner has dimension ``dim + 1``.

The statistics change on ``learn`` only, after the inner step, so ``predict`` is pure and
the prediction ``learn`` reports equals ``predict(x)`` called just before it (progressive
validation). A learner class refuses a step that makes no sense for it by naming it, with
the reason, in its ``preprocess_refused`` (docs/design.md, "Preprocessing").
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from learners.base import (
    BatchInterrupted,
    Learner,
    Prediction,
    State,
    StateSize,
    StepReport,
    readonly,
)

#: the steps, in the order they are applied (and the option names).
STEPS = ("standardize", "clip", "intercept")
#: state fields of the wrapper itself; the inner learner's fields are prefixed ``inner.``.
_OWN = ("kind", "dim", "params", "preprocess", "welford_n_", "welford_mean_", "welford_m2_")
_INNER = "inner."


@dataclass(frozen=True)
class PreprocessOptions:
    """The ``preprocess`` option of a model spec: ``{"standardize": true, "intercept": true,
    "clip": 5.0}``, every key optional; null, ``{}`` or all off is no preprocessing."""

    standardize: bool = False
    intercept: bool = False
    clip: float | None = None

    @classmethod
    def parse(cls, raw: Any) -> PreprocessOptions:
        """Options from a spec's JSON value; ``ValueError`` naming the bad key or value."""
        if raw is None:
            return cls()
        if isinstance(raw, PreprocessOptions):
            return raw
        if not isinstance(raw, Mapping):
            raise ValueError(f"preprocess must be an object or null, got {raw!r}")
        unknown = sorted(set(raw) - set(STEPS))
        if unknown:
            raise ValueError(
                f"preprocess: unknown option(s) {', '.join(map(repr, unknown))};"
                f" valid: {', '.join(STEPS)}"
            )
        flags = {}
        for name in ("standardize", "intercept"):
            value = raw.get(name)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"preprocess: {name!r} must be true, false or null, got {value!r}")
            flags[name] = bool(value)
        clip = raw.get("clip")
        if clip is not None:
            ok = isinstance(clip, int | float) and not isinstance(clip, bool)
            if not ok or not (0.0 < float(clip) < math.inf):
                raise ValueError(
                    f"preprocess: 'clip' must be a positive finite number or null, got {clip!r}"
                )
            clip = float(clip)
        return cls(flags["standardize"], flags["intercept"], clip)

    def steps(self) -> list[str]:
        """The steps switched on, in the order they apply."""
        on = {
            "standardize": self.standardize,
            "clip": self.clip is not None,
            "intercept": self.intercept,
        }
        return [step for step in STEPS if on[step]]

    def __bool__(self) -> bool:
        return bool(self.steps())

    def check_allowed(self, cls: type[Learner]) -> None:
        """``ValueError`` when ``cls`` refuses one of the steps (its ``preprocess_refused``)."""
        for step in self.steps():
            reason = cls.preprocess_refused.get(step)
            if reason is not None:
                raise ValueError(f"{cls.kind}: preprocess {step!r} is not supported: {reason}")

    def check_dim(self, cls: type[Learner], dim: Any) -> None:
        """``cls``'s check of ``dim``, and room for the intercept column."""
        cls._check_dim(dim)
        if self.intercept and int(dim) >= cls.max_dim:
            raise ValueError(
                f"{cls.kind}: dim {dim} leaves no room for the intercept column"
                f" (preprocess 'intercept' allows at most {cls.max_dim - 1};"
                ' a spec without it says "preprocess": null)'
            )

    def state_size(self, cls: type[Learner], dim: int, params: Mapping[str, Any]) -> StateSize:
        """The inner learner's declared state at its dimension plus the Welford statistics."""
        self.check_allowed(cls)
        self.check_dim(cls, dim)
        inner = cls.state_size(dim + int(self.intercept), params)
        total, formula = inner.bytes, inner.formula
        if self.intercept:
            formula += " with d = dim + 1 (intercept column)"
        if self.standardize:
            total += 16 * dim
            formula += " + 16*dim bytes (standardisation statistics)"
        return StateSize(total, formula)


def welford_update(n: int, mean: np.ndarray, m2: np.ndarray, x: np.ndarray) -> int:
    """One Welford step on ``mean`` and ``m2`` (in place); returns the new count."""
    n += 1
    delta = x - mean
    mean += delta / n
    m2 += delta * (x - mean)
    return n


class Preprocessed(Learner):
    """A learner behind online preprocessing (module docstring): standardise, clip, intercept.

    It answers as the inner learner does (``kind``, ``task``, predictions, reports) on the
    transformed input; ``dim`` is the raw input's. Built by ``learners.build(kind, dim,
    preprocess=..., **params)``; restored by ``learners.load_state``.

    Parameters
    ----------
    inner_cls : type[Learner]
        The learner class to wrap (it may refuse steps: ``preprocess_refused``).
    dim : int
        The raw input dimension.
    options : PreprocessOptions
        The steps to apply.
    params : dict
        The inner learner's hyperparameters.

    Attributes
    ----------
    welford_n_ : int
        Events learned (standardisation only).
    welford_mean_, welford_m2_ : ndarray of shape (dim,)
        Welford's running mean and sum of squared deviations (standardisation only).

    Examples
    --------
    >>> import numpy as np, learners
    >>> rng = np.random.default_rng(0)
    >>> X = 100.0 + 10.0 * rng.normal(size=(500, 3))
    >>> y = (X - 100.0) @ np.array([0.1, -0.2, 0.3]) + 5.0
    >>> def mae_last_100(model):
    ...     errors = [abs(model.learn(x, v).prediction - v) for x, v in zip(X, y)]
    ...     return round(float(np.mean(errors[-100:])), 3)
    >>> mae_last_100(learners.build("pa", 3))  # raw x: no offset, badly scaled
    1.494
    >>> mae_last_100(learners.build("pa", 3, preprocess={"standardize": True, "intercept": True}))
    0.069
    """

    welford_n_: int
    welford_mean_: np.ndarray
    welford_m2_: np.ndarray

    def __init__(
        self,
        inner_cls: type[Learner],
        dim: int,
        options: PreprocessOptions,
        params: Mapping[str, Any],
    ) -> None:
        options.check_allowed(inner_cls)
        options.check_dim(inner_cls, dim)
        self._setup(inner_cls(int(dim) + int(options.intercept), **params), options)
        if options.standardize:
            self.welford_n_ = 0
            self.welford_mean_ = np.zeros(self.dim)
            self.welford_m2_ = np.zeros(self.dim)

    def _setup(self, inner: Learner, options: PreprocessOptions) -> None:
        self._inner = inner
        self.options = options
        self.kind = inner.kind  # type: ignore[misc]  # the model's kind is the inner one's
        self.task = inner.task  # type: ignore[misc]
        self.dim = inner.dim - int(options.intercept)

    @property
    def inner(self) -> Learner:
        """The wrapped learner (it sees transformed input)."""
        return self._inner

    def get_params(self) -> dict[str, Any]:
        return self._inner.get_params()

    def __repr__(self) -> str:
        return f"Preprocessed({self._inner!r}, {asdict(self.options)})"

    # ---- the transform ---------------------------------------------------------------------
    def _transform(self, x: np.ndarray) -> np.ndarray:
        """The inner learner's input for ``x`` with the current statistics (a new array)."""
        if self.options.standardize:
            return self._transform_with(x, self.welford_n_, self.welford_mean_, self.welford_m2_)
        return self._transform_with(x, 0, None, None)

    def _transform_with(
        self, x: np.ndarray, n: int, mean: np.ndarray | None, m2: np.ndarray | None
    ) -> np.ndarray:
        opts, d = self.options, self.dim
        z = np.zeros(d + int(opts.intercept))
        if opts.standardize:
            if n:  # else every feature maps to 0, as one with sd 0 does
                assert mean is not None and m2 is not None
                sd = np.sqrt(m2 / n)
                np.divide(x - mean, sd, out=z[:d], where=sd > 0)
        else:
            z[:d] = x
        if opts.clip is not None:
            np.clip(z[:d], -opts.clip, opts.clip, out=z[:d])
        if opts.intercept:
            z[d] = 1.0
        return z

    def _observe(self, x: np.ndarray) -> None:
        if self.options.standardize:
            self.welford_n_ = welford_update(
                self.welford_n_, self.welford_mean_, self.welford_m2_, x
            )

    def _transform_rows(self, rows: Sequence[np.ndarray]) -> np.ndarray:
        """Each row's input as ``learn`` on each in turn would make it (the statistics
        advanced on copies); the learner is not changed."""
        Z = np.empty((len(rows), self.dim + int(self.options.intercept)))
        if not self.options.standardize:
            for i, x in enumerate(rows):
                Z[i] = self._transform_with(x, 0, None, None)
            return Z
        n, mean, m2 = self.welford_n_, self.welford_mean_.copy(), self.welford_m2_.copy()
        for i, x in enumerate(rows):
            Z[i] = self._transform_with(x, n, mean, m2)
            n = welford_update(n, mean, m2, x)
        return Z

    # ---- the contract ----------------------------------------------------------------------
    def _check_y(self, y: Any) -> Any:
        return self._inner._check_y(y)

    def _predict(self, x: np.ndarray, hint: float | None) -> Prediction:
        return self._inner._predict(self._transform(x), hint)

    def _learn(self, x: np.ndarray, y: Any, hint: float | None) -> StepReport:
        report = self._inner._learn(self._transform(x), y, hint)
        self._observe(x)  # after the step: the prediction used the past only
        return report

    def predict_many(
        self, X: Any, *, hints: Sequence[float | None] | None = None
    ) -> list[Prediction]:
        return self._inner.predict_many(self._transform_rows_pure(X), hints=hints)

    def learn_many(
        self, X: Any, y: Sequence[Any], *, hints: Sequence[float | None] | None = None
    ) -> Sequence[StepReport]:
        """``learn`` on each row in order: the rows' inputs are made as a loop makes them,
        then the inner learner's own ``learn_many`` learns them; the statistics advance by
        the rows it learned (all, or those before a :class:`BatchInterrupted`)."""
        rows = self._check_rows(X)
        Z = self._transform_rows(rows)
        try:
            reports = self._inner.learn_many(Z, y, hints=hints)
        except BatchInterrupted as exc:
            for x in rows[: exc.index]:
                self._observe(x)
            raise
        for x in rows:
            self._observe(x)
        return reports

    def _transform_rows_pure(self, X: Any) -> np.ndarray:
        """Every row transformed with the current statistics (what ``predict`` uses)."""
        rows = self._check_rows(X)
        Z = np.empty((len(rows), self.dim + int(self.options.intercept)))
        for i, x in enumerate(rows):
            Z[i] = self._transform(x)
        return Z

    # ---- what the inner learner offers, on transformed input -------------------------------
    @property
    def weights(self) -> np.ndarray:
        """The inner learner's weights, in the transformed space (intercept last)."""
        return readonly(np.asarray(self._inner.weights))  # type: ignore[attr-defined]

    @property
    def predict_proba(self) -> Callable[..., Any]:
        """The inner learner's ``predict_proba`` on the transformed ``x`` (absent when the
        inner learner has none: ``hasattr`` answers False)."""
        fn = self._inner.predict_proba  # type: ignore[attr-defined]

        def predict_proba(x: Any, *, hint: float | None = None) -> Any:
            return fn(self._transform(self._check_x(x)), hint=hint)

        return predict_proba

    @property
    def predict_proba_many(self) -> Callable[..., Any]:
        """The inner learner's ``predict_proba_many`` on the transformed rows."""
        fn = self._inner.predict_proba_many  # type: ignore[attr-defined]

        def predict_proba_many(X: Any, *, hints: Sequence[float | None] | None = None) -> Any:
            return fn(self._transform_rows_pure(X), hints=hints)

        return predict_proba_many

    @property
    def quantify(self) -> Callable[..., float]:
        """The inner quantifier's ``quantify`` on the transformed batch."""
        fn = self._inner.quantify  # type: ignore[attr-defined]

        def quantify(X: Any, *args: Any, **kwargs: Any) -> float:
            return float(fn(self._transform_rows_pure(X), *args, **kwargs))

        return quantify

    @property
    def window_prevalence(self) -> Callable[..., float]:
        """The inner quantifier's windowed prevalence (it takes no ``x``)."""
        return self._inner.window_prevalence  # type: ignore[attr-defined,no-any-return]

    # ---- state -----------------------------------------------------------------------------
    def state(self) -> State:
        """The inner learner's state (fields prefixed ``inner.``, its kind and params at the
        top), the options (JSON) and the Welford statistics."""
        inner = self._inner.state()
        out: State = {
            "kind": inner["kind"],
            "dim": self.dim,
            "params": inner["params"],
            "preprocess": json.dumps(asdict(self.options), sort_keys=True),
        }
        if self.options.standardize:
            out["welford_n_"] = int(self.welford_n_)
            out["welford_mean_"] = self.welford_mean_.copy()
            out["welford_m2_"] = self.welford_m2_.copy()
        for name, value in inner.items():
            if name not in ("kind", "dim", "params"):
                out[_INNER + name] = value
        return out

    @classmethod
    def from_state(cls, state: State) -> Learner:
        """Rebuild from ``state()``; it continues bit for bit identically."""
        _require(state, ("kind", "dim", "params", "preprocess"))
        options = PreprocessOptions.parse(json.loads(str(state["preprocess"])))
        if options.standardize:
            _require(state, ("welford_n_", "welford_mean_", "welford_m2_"))
        dim = int(state["dim"])
        inner_state: State = {
            "kind": state["kind"],
            "dim": dim + int(options.intercept),
            "params": state["params"],
        }
        for name, value in state.items():
            if name.startswith(_INNER):
                inner_state[name[len(_INNER) :]] = value
            elif name not in _OWN:
                raise ValueError(f"unexpected field {name!r} in a preprocessed state")
        inner = Learner.from_state(inner_state)
        learner = object.__new__(Preprocessed)
        learner._setup(inner, options)
        if options.standardize:
            mean, m2 = state["welford_mean_"], state["welford_m2_"]
            if not isinstance(mean, np.ndarray) or not isinstance(m2, np.ndarray):
                raise ValueError("preprocessed state: Welford statistics must be arrays")
            if mean.shape != (dim,) or m2.shape != (dim,):
                raise ValueError(f"preprocessed state: Welford statistics must have shape ({dim},)")
            learner.welford_n_ = int(state["welford_n_"])
            learner.welford_mean_ = mean.astype(np.float64, copy=True)
            learner.welford_m2_ = m2.astype(np.float64, copy=True)
        return learner


def _require(state: Mapping[str, Any], names: Sequence[str]) -> None:
    missing = [name for name in names if name not in state]
    if missing:
        raise ValueError(f"preprocessed state lacks {', '.join(missing)}")


def is_preprocessed_state(state: Mapping[str, Any]) -> bool:
    return "preprocess" in state


def wrap(cls: type[Learner], dim: int, preprocess: Any, params: Mapping[str, Any]) -> Learner:
    """``cls(dim, **params)`` behind the ``preprocess`` options; the bare learner when they
    switch nothing on (so its state is the bare learner's)."""
    options = PreprocessOptions.parse(preprocess)
    if not options:
        return cls(dim, **params)
    return Preprocessed(cls, dim, options, params)
