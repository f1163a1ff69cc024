"""The JSON Schema of each kind's hyperparameters (``Learner.params_schema``, what the
service's OpenAPI document shows) agrees with the checks ``__init__`` makes: it never
refuses a configuration the learner accepts, and a bound it states is the learner's."""

from __future__ import annotations

import json
import math
from typing import Any

import jsonschema_rs
import pytest

import learners
from learners._constraints import AnyOf, Boolean, Constraint, Interval, NoneOr, Options
from learners.checks import DIM

KINDS = sorted(learners.REGISTRY)


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return bool(jsonschema_rs.validator_for(schema).is_valid(value))


@pytest.mark.parametrize("kind", KINDS)
def test_schema_names_every_parameter_and_accepts_what_the_learner_accepts(kind: str) -> None:
    cls = learners.REGISTRY[kind]
    schema = cls.params_schema()
    assert list(schema["properties"]) == cls.param_names()
    assert schema["additionalProperties"] is False
    for params in cls._test_params():
        cls(DIM, **params)  # the learner accepts it ...
        assert _valid(schema, json.loads(json.dumps(params))), params  # ... so must the schema
    assert not _valid(schema, {"no_such_parameter": 1})


@pytest.mark.parametrize("kind", KINDS)
def test_every_default_the_schema_states_is_valid(kind: str) -> None:
    props = learners.REGISTRY[kind].params_schema()["properties"]
    for name, prop in props.items():
        if "default" in prop:
            rest = {k: v for k, v in prop.items() if k != "default"}
            assert _valid(rest, prop["default"]), (kind, name)


PROBES: list[Any] = [-2, -1, -0.5, 0, 0.25, 0.5, 1, 1.5, 2, 3, 100, "pa", "x", True, None, [1.0]]
CONSTRAINTS: list[Constraint] = [
    Interval(0.0, math.inf, closed="neither"),
    Interval(0.0, 1.0, closed="right"),
    Interval(0.0, 1.0, closed="left"),
    Interval(-1.0, 2.0, closed="both"),
    Interval(1, 100, integer=True),
    Options(("pa", "pa1")),
    Boolean(),
    NoneOr(Interval(0.0, 1.0)),
    AnyOf(Interval(2.0, 3.0), Options(("x",))),
]


@pytest.mark.parametrize("constraint", CONSTRAINTS, ids=repr)
def test_constraint_schema_decides_as_the_constraint(constraint: Constraint) -> None:
    schema = constraint.json_schema()
    for value in PROBES:
        assert _valid(schema, value) == constraint.is_satisfied_by(value), value
