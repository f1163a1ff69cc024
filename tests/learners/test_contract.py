"""One contract, every learner: REGISTRY x checks (River's ``test_estimators`` pattern)."""

from __future__ import annotations

import pytest

from learners import REGISTRY
from learners.checks import yield_checks

CASES = [
    pytest.param(cls, params, check, id=f"{kind}[{i}]:{check.__name__}")
    for kind, cls in sorted(REGISTRY.items())
    for i, params in enumerate(cls._test_params())
    for check in yield_checks(cls)
]


@pytest.mark.parametrize(("cls", "params", "check"), CASES)
def test_contract(cls, params, check) -> None:  # type: ignore[no-untyped-def]
    check(cls, params)


def test_registry_is_not_empty() -> None:
    assert "pa" in REGISTRY


@pytest.mark.parametrize("kind", ["vaw", "arow", "nemsis"])
def test_learn_many_interrupted_after_validation_says_how_far_it_got(kind, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A step failing mid-batch (not a validation failure) raises BatchInterrupted: the rows
    before it are learned exactly as a loop learns them, the rest untouched."""
    from learners import BatchInterrupted
    from learners.checks import DIM, assert_states_equal

    cls = REGISTRY[kind]
    X, y = cls._test_stream(DIM, 10, 3)
    a, b = cls(DIM), cls(DIM)
    a._test_prepare(X)
    b._test_prepare(X)
    real = a._learn
    calls = {"n": 0}

    def failing(x, v, h):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 4:
            raise ValueError("step failed")
        return real(x, v, h)

    monkeypatch.setattr(a, "_learn", failing)
    with pytest.raises(BatchInterrupted) as info:
        a.learn_many(X, y)
    assert info.value.index == 3 and len(info.value.reports) == 3
    assert str(info.value.__cause__) == "step failed"
    for x, v in zip(X[:3], y[:3], strict=True):
        b.learn(x, v)
    assert_states_equal(a.state(), b.state())
