"""One contract, every learner: REGISTRY x checks (River's ``test_estimators`` pattern)."""

from __future__ import annotations

import pytest

from learners import REGISTRY, Learner
from learners.checks import yield_checks
from learners.preprocess import STEPS, Preprocessed, PreprocessOptions

CASES = [
    pytest.param(cls, params, check, id=f"{kind}[{i}]:{check.__name__}")
    for kind, cls in sorted(REGISTRY.items())
    for i, params in enumerate(cls._test_params())
    for check in yield_checks(cls)
]


def _preprocessed(inner: type[Learner]) -> type[Learner] | None:
    """``inner`` behind every preprocessing step it accepts, as a class the checks can
    build (``cls(dim, **params)``, ``cls.from_state``); None when it refuses them all."""
    allowed = [s for s in STEPS if s not in inner.preprocess_refused]
    if not allowed:
        return None
    options = PreprocessOptions.parse({s: (3.0 if s == "clip" else True) for s in allowed})

    class Wrapped(Preprocessed):
        __doc__ = Preprocessed.__doc__
        _constraints = inner._constraints
        task = inner.task  # the checks that apply follow the inner learner's task
        _test_stream = inner._test_stream
        _test_bad_labels = inner._test_bad_labels

        def __init__(self, dim: int, **params: object) -> None:
            super().__init__(inner, dim, options, params)

        @classmethod
        def from_state(cls, state):  # type: ignore[no-untyped-def]
            return Preprocessed.from_state(state)

    Wrapped.__name__ = Wrapped.__qualname__ = f"Preprocessed[{inner.kind}]"
    return Wrapped


WRAPPED = {kind: _preprocessed(cls) for kind, cls in sorted(REGISTRY.items())}
CASES += [
    pytest.param(wrapped, params, check, id=f"preprocessed-{kind}[{i}]:{check.__name__}")
    for kind, wrapped in WRAPPED.items()
    if wrapped is not None
    for i, params in enumerate(REGISTRY[kind]._test_params())
    for check in yield_checks(wrapped)
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
