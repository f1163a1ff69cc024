"""Declarative hyperparameter constraints (in the spirit of scikit-learn's ``_param_validation``).

Each learner declares ``_constraints = {"C": Interval(0, inf, closed="right"), ...}``; the base
class checks every hyperparameter against it in ``__init__`` and raises a ``ValueError`` that
names the parameter and its valid range.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


class Constraint:
    """A predicate on one hyperparameter with a human-readable description."""

    def is_satisfied_by(self, value: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the values this constraint accepts, for the service's OpenAPI
        document (so clients and fuzzers see the real bounds); at most as strict as
        ``is_satisfied_by``, which stays the check that decides."""
        return {}


@dataclass(frozen=True)
class Interval(Constraint):
    """A real (or integer, with ``integer=True``) number in an interval.

    ``closed`` is one of ``"both"``, ``"left"``, ``"right"``, ``"neither"``.
    """

    low: float = -math.inf
    high: float = math.inf
    closed: str = "both"
    integer: bool = False

    def is_satisfied_by(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.integer and not float(value).is_integer():
            return False
        v = float(value)
        if math.isnan(v):
            return False
        lo_ok = v >= self.low if self.closed in ("both", "left") else v > self.low
        hi_ok = v <= self.high if self.closed in ("both", "right") else v < self.high
        return lo_ok and hi_ok

    def describe(self) -> str:
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        what = "an integer" if self.integer else "a real number"
        return f"{what} in {left}{self.low}, {self.high}{right}"

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "integer" if self.integer else "number"}
        if math.isfinite(self.low):
            out["minimum" if self.closed in ("both", "left") else "exclusiveMinimum"] = self.low
        if math.isfinite(self.high):
            out["maximum" if self.closed in ("both", "right") else "exclusiveMaximum"] = self.high
        return out


@dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of values (strings, usually)."""

    values: tuple[Any, ...]

    def __init__(self, values: Iterable[Any]) -> None:
        object.__setattr__(self, "values", tuple(values))

    def is_satisfied_by(self, value: Any) -> bool:
        return any(value == v and type(value) is type(v) for v in self.values)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(v) for v in self.values)

    def json_schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


@dataclass(frozen=True)
class Boolean(Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "a boolean"

    def json_schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


@dataclass(frozen=True)
class NoneOr(Constraint):
    """``None`` or whatever ``inner`` accepts."""

    inner: Constraint

    def is_satisfied_by(self, value: Any) -> bool:
        return value is None or self.inner.is_satisfied_by(value)

    def describe(self) -> str:
        return f"None or {self.inner.describe()}"

    def json_schema(self) -> dict[str, Any]:
        return {"anyOf": [self.inner.json_schema(), {"type": "null"}]}


@dataclass(frozen=True)
class AnyOf(Constraint):
    """Accepted when any of the alternatives accepts."""

    alternatives: tuple[Constraint, ...]

    def __init__(self, *alternatives: Constraint) -> None:
        object.__setattr__(self, "alternatives", tuple(alternatives))

    def is_satisfied_by(self, value: Any) -> bool:
        return any(c.is_satisfied_by(value) for c in self.alternatives)

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.alternatives)

    def json_schema(self) -> dict[str, Any]:
        return {"anyOf": [c.json_schema() for c in self.alternatives]}


@dataclass(frozen=True)
class Predicate(Constraint):
    """A free-form check, for structured values (lists of groups, class lists)."""

    check: Callable[[Any], bool]
    description: str
    #: what JSON Schema can say of the accepted values (the check may say more)
    schema: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def is_satisfied_by(self, value: Any) -> bool:
        try:
            return bool(self.check(value))
        except (TypeError, ValueError):
            return False

    def describe(self) -> str:
        return self.description

    def json_schema(self) -> dict[str, Any]:
        return dict(self.schema)


def validate(owner: str, params: dict[str, Any], constraints: dict[str, Constraint]) -> None:
    """Raise ``ValueError`` naming the first parameter that violates its constraint."""
    for name, value in params.items():
        constraint = constraints.get(name)
        if constraint is not None and not constraint.is_satisfied_by(value):
            raise ValueError(
                f"{owner}: parameter {name!r} must be {constraint.describe()}, got {value!r}"
            )
