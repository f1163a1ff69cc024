"""The fault boundary's two tools: a snapshot that puts a model back exactly as it was, and
the check that no step left a non-finite number behind (docs/reliability.md).

A snapshot is taken before each learned batch (and before each event on the per-event
path), so it must be cheap: learned arrays are copied, immutable values shared, and only
other containers deep-copied. One memo for the whole object keeps aliasing intact (a
learner whose spare buffers list holds its own arrays gets a copy with the same links).
"""

from __future__ import annotations

import copy
import math
from typing import Any, Protocol

import numpy as np

from learners import Preprocessed

_SHARED = (int, float, str, bytes, bool, type(None), np.generic, type(len))


class _Runtime(Protocol):
    learner: Any
    stats: Any


class UnsafeState(ArithmeticError):
    """A step left a non-finite number where there was none."""


def clone(obj: Any, memo: dict[int, Any] | None = None) -> Any:
    """A copy of ``obj`` that shares nothing mutable with it (a fast ``deepcopy`` for
    objects made of arrays and scalars)."""
    memo = {} if memo is None else memo
    new = object.__new__(type(obj))
    memo[id(obj)] = new
    state = {}
    for name, value in vars(obj).items():
        if type(value) is np.ndarray:
            copied = memo.get(id(value))
            if copied is None:
                copied = memo[id(value)] = value.copy()
            state[name] = copied
        elif isinstance(value, _SHARED) or callable(value):
            state[name] = value
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            state[name] = clone(value, memo)
        elif type(value) is dict and all(isinstance(v, _SHARED) for v in value.values()):
            state[name] = dict(value)  # e.g. the last diagnostics: a shallow copy suffices
        elif type(value) is list and all(isinstance(v, _SHARED) for v in value):
            state[name] = list(value)
        else:
            state[name] = copy.deepcopy(value, memo)
    new.__dict__.update(state)
    return new


class Undo:
    """The learner and statistics of a model as they were when this was made."""

    __slots__ = ("learner", "stats")

    def __init__(self, learner: Any, stats: Any) -> None:
        self.learner = clone(learner)
        self.stats = clone(stats)

    def restore(self, rt: _Runtime) -> None:
        """Put ``rt`` back; the snapshot becomes the live state (it is used once)."""
        rt.learner, rt.stats = self.learner, self.stats


def check_finite(undo: Undo, learner: Any, stats: Any) -> None:
    """Raise :class:`UnsafeState` when the learner or the statistics hold a NaN, or an
    infinity in a value that was finite in the snapshot (some learners keep -inf on
    purpose, e.g. the log-weights of inactive experts)."""
    _check(learner, undo.learner, type(learner).__name__)
    if isinstance(learner, Preprocessed):  # the wrapped learner's own values too
        _check(learner.inner, undo.learner.inner, type(learner.inner).__name__)
    _check(stats, undo.stats, "statistics")
    if stats.regret is not None:
        _check(stats.regret, undo.stats.regret, "regret statistics")


def _check(obj: Any, before: Any, what: str) -> None:
    for name, value in vars(obj).items():
        t = type(value)
        if t is float:
            ok = math.isfinite(value)
        elif t is np.ndarray and value.dtype.kind in "fc":
            ok = bool(np.isfinite(value).all())
        else:
            continue
        if ok:
            continue
        old = getattr(before, name, None)
        if not _has_nan(value) and old is not None and not _all_finite(old):
            continue  # non-finite before too (and no NaN): the learner's own convention
        raise UnsafeState(f"the step left a non-finite value in {what} {name!r}")


def _has_nan(value: Any) -> bool:
    return bool(np.isnan(value).any()) if isinstance(value, np.ndarray) else math.isnan(value)


def _all_finite(value: Any) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype.kind not in "fc" or bool(np.isfinite(value).all())
    return not isinstance(value, float) or math.isfinite(value)
