"""Generic contract checks for every registered learner (pytest-free, River's ``checks``).

Each check takes a learner class and one hyperparameter dict from its ``_test_params()``
and raises ``AssertionError`` on a violation. ``tests/learners/test_contract.py`` runs
``REGISTRY x yield_checks()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np

from learners.base import Learner, State
from learners.codec import decode_state, encode_state

DIM = 5
WARMUP = 50
CONTINUE = 200

Check = Callable[[type[Learner], dict[str, Any]], None]


def _fresh(
    cls: type[Learner], params: dict[str, Any], n: int, seed: int = 0
) -> tuple[Learner, np.ndarray, list[Any]]:
    learner = cls(DIM, **params)
    X, y = cls._test_stream(DIM, n, seed)
    learner._test_prepare(X)
    return learner, X, y


def assert_states_equal(a: State, b: State) -> None:
    assert a.keys() == b.keys(), f"state keys differ: {sorted(a)} vs {sorted(b)}"
    for k in a:
        va, vb = a[k], b[k]
        if isinstance(va, np.ndarray):
            assert isinstance(vb, np.ndarray), k
            assert va.dtype == vb.dtype and va.shape == vb.shape, k
            assert np.array_equal(va, vb, equal_nan=va.dtype.kind in "fc"), f"field {k} differs"
        elif isinstance(va, float) and math.isnan(va):
            assert isinstance(vb, float) and math.isnan(vb), k
        else:
            assert va == vb and type(va) is type(vb), f"field {k}: {va!r} != {vb!r}"


def _same_output(p: Any, q: Any) -> bool:
    if isinstance(p, float) and isinstance(q, float):
        return p == q or (math.isnan(p) and math.isnan(q))
    return bool(p == q)


def check_predict_is_pure(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, WARMUP + 1)
    for x, v in zip(X[:WARMUP], y[:WARMUP], strict=True):
        learner.learn(x, v)
    before = learner.state()
    learner.predict(X[WARMUP])
    assert_states_equal(before, learner.state())


def check_learn_reports_prior_prediction(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, WARMUP)
    for x, v in zip(X, y, strict=True):
        expected = learner.predict(x).value
        got = learner.learn(x, v).prediction
        assert _same_output(expected, got), f"learn().prediction {got!r} != predict() {expected!r}"


def check_state_roundtrip_continues_identically(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, WARMUP + CONTINUE)
    for x, v in zip(X[:WARMUP], y[:WARMUP], strict=True):
        learner.learn(x, v)
    clone = cls.from_state(decode_state(encode_state(learner.state())))
    assert_states_equal(learner.state(), clone.state())
    for x, v in zip(X[WARMUP:], y[WARMUP:], strict=True):
        ra, rb = learner.learn(x, v), clone.learn(x, v)
        assert _same_output(ra.prediction, rb.prediction)
        assert ra.loss == rb.loss or (math.isnan(ra.loss) and math.isnan(rb.loss))
    assert_states_equal(learner.state(), clone.state())


def check_state_is_a_snapshot(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, WARMUP)
    for x, v in zip(X, y, strict=True):
        learner.learn(x, v)
    snap = learner.state()
    for k, v in snap.items():
        assert isinstance(v, np.ndarray | float | int | str), f"field {k}: {type(v).__name__}"
        if isinstance(v, np.ndarray):
            assert not any(
                np.shares_memory(v, a) for a in vars(learner).values() if isinstance(a, np.ndarray)
            ), f"state field {k} shares memory with the live learner"


def check_bad_input_rejected_without_change(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, WARMUP + 1)
    for x, v in zip(X[:WARMUP], y[:WARMUP], strict=True):
        learner.learn(x, v)
    before = learner.state()
    x_ok, y_ok = X[WARMUP], y[WARMUP]
    nan_x = x_ok.copy()
    nan_x[0] = np.nan
    inf_x = x_ok.copy()
    inf_x[-1] = np.inf
    bad_x: list[Any] = [
        np.zeros(DIM + 1),
        np.zeros(DIM - 1),
        np.zeros((DIM, 1)),
        nan_x,
        inf_x,
        ["a"] * DIM,
    ]
    bad_y: list[Any] = cls._test_bad_labels()
    attempts: list[tuple[str, Callable[[], Any]]] = []
    for bx in bad_x:
        attempts.append((f"learn(x={bx!r})", partial(learner.learn, bx, y_ok)))
        attempts.append((f"predict(x={bx!r})", partial(learner.predict, bx)))
    for by in bad_y:
        attempts.append((f"learn(y={by!r})", partial(learner.learn, x_ok, by)))
    for what, call in attempts:
        try:
            call()
        except ValueError:
            pass
        else:
            raise AssertionError(f"no ValueError for {what}")
        assert_states_equal(before, learner.state())


def check_cold_start_is_finite(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, 3)
    for x in (X[0], np.zeros(DIM)):
        value = learner.predict(x).value
        if isinstance(value, float):
            assert math.isfinite(value), f"cold-start prediction {value}"
    rep = learner.learn(np.zeros(DIM), y[0])
    assert math.isfinite(rep.loss)
    rep = learner.learn(X[1], y[1])
    assert math.isfinite(rep.loss)
    for k, v in learner.state().items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            assert not np.any(np.isnan(v)), f"NaN in {k} after a cold start"


def check_bad_hyperparameters_raise(cls: type[Learner], params: dict[str, Any]) -> None:
    for name in cls._constraints:
        try:
            cls(DIM, **{**params, name: object()})
        except ValueError as exc:
            assert name in str(exc), f"message does not name {name!r}: {exc}"
        else:
            raise AssertionError(f"no ValueError for a bad {name!r}")
    for bad_dim in (0, -1, 2.5, True):
        try:
            cls(bad_dim, **params)  # type: ignore[arg-type]
        except ValueError:
            pass
        else:
            raise AssertionError(f"no ValueError for dim={bad_dim!r}")


def check_docstring_has_examples(cls: type[Learner], params: dict[str, Any]) -> None:
    doc = cls.__doc__ or ""
    assert "Examples" in doc and "Parameters" in doc, f"{cls.__name__} docstring incomplete"


def check_learn_many_equals_loop(cls: type[Learner], params: dict[str, Any]) -> None:
    a, X, y = _fresh(cls, params, WARMUP)
    b, _, _ = _fresh(cls, params, WARMUP)
    reports = a.learn_many(X, y)
    for x, v, ra in zip(X, y, reports, strict=True):
        rb = b.learn(x, v)
        assert _same_output(ra.prediction, rb.prediction)
    assert_states_equal(a.state(), b.state())


def check_predict_many_equals_loop(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, y = _fresh(cls, params, WARMUP)
    learner.learn_many(X[: WARMUP // 2], y[: WARMUP // 2])
    before = encode_state(learner.state())
    rest = X[WARMUP // 2 :]  # not yet learned (transductive blocks use each x up)
    many = learner.predict_many(rest)
    assert encode_state(learner.state()) == before, "predict_many changed the state"
    for x, pm in zip(rest, many, strict=True):
        p = learner.predict(x)
        assert _same_output(p.value, pm.value) and p.scores == pm.scores


def check_predict_proba(cls: type[Learner], params: dict[str, Any]) -> None:
    """Classifiers: one probability per class (the labels ``predict`` answers), each in
    [0, 1], summing to 1; pure; ``predict_proba_many`` equals the loop."""
    learner, X, y = _fresh(cls, params, WARMUP)
    learner.learn_many(X[: WARMUP // 2], y[: WARMUP // 2])
    before = encode_state(learner.state())
    rest = X[WARMUP // 2 :]
    many = learner.predict_proba_many(rest)
    for x, pm in zip(rest, many, strict=True):
        proba = learner.predict_proba(x)
        assert proba == pm, f"predict_proba_many {pm} != predict_proba {proba}"
        assert learner.predict(x).value in proba, f"{learner.predict(x).value!r} not in {proba}"
        assert all(0.0 <= p <= 1.0 for p in proba.values()), proba
        assert math.isclose(sum(proba.values()), 1.0, abs_tol=1e-12), proba
    assert encode_state(learner.state()) == before, "predict_proba changed the state"


def check_regressor_has_no_proba(cls: type[Learner], params: dict[str, Any]) -> None:
    learner, X, _ = _fresh(cls, params, 2)
    for call in (partial(learner.predict_proba, X[0]), partial(learner.predict_proba_many, X)):
        try:
            call()
        except TypeError:
            pass
        else:
            raise AssertionError(f"{cls.kind}: a regressor answered predict_proba")


CHECKS: tuple[Check, ...] = (
    check_predict_is_pure,
    check_learn_reports_prior_prediction,
    check_state_roundtrip_continues_identically,
    check_state_is_a_snapshot,
    check_bad_input_rejected_without_change,
    check_cold_start_is_finite,
    check_bad_hyperparameters_raise,
    check_docstring_has_examples,
    check_learn_many_equals_loop,
    check_predict_many_equals_loop,
)


def yield_checks(cls: type[Learner]) -> Iterator[Check]:
    """Every generic check that applies to ``cls``."""
    yield from CHECKS
    if cls.task == "classification":
        yield check_predict_proba
    else:
        yield check_regressor_has_no_proba
