"""Preprocessing in the model (learners/preprocess.py): the transform's arithmetic, replay
bit-identity through the codec, Welford statistics that only ``learn`` moves, refusals."""

from __future__ import annotations

import numpy as np
import pytest

import learners
from learners import BatchInterrupted, Preprocessed, decode_state, encode_state, load_state
from learners.checks import assert_states_equal

FULL = {"standardize": True, "intercept": True, "clip": 3.0}
DIM = 4


def stream(kind: str, n: int = 400, seed: int = 1) -> tuple[np.ndarray, list[object]]:
    """Raw features far from standard (offsets and scales of 1e-2..1e3) and fitting labels."""
    rng = np.random.default_rng(seed)
    scale = np.array([1e-2, 1.0, 50.0, 1e3])
    X = 7.0 * scale + scale * rng.normal(size=(n, DIM))
    z = (X - 7.0 * scale) / scale
    y = z @ np.array([1.0, -2.0, 0.5, 0.0]) + 3.0 + 0.1 * rng.normal(size=n)
    if learners.REGISTRY[kind].task == "classification":
        return X, [int(v > 3.0) for v in y]
    return X, [float(v) for v in y]


def options_for(kind: str) -> dict[str, object]:
    refused = learners.REGISTRY[kind].preprocess_refused
    return {k: v for k, v in FULL.items() if k not in refused}


KINDS = ["pa", "vaw", "dvaw-ensemble", "rls", "arow", "cw", "perceptron", "nemsis", "scan"]


def test_transform_is_standardise_clip_intercept_with_past_statistics() -> None:
    X, y = stream("pa", n=60)
    model = learners.build("pa", DIM, preprocess=FULL)
    assert isinstance(model, Preprocessed) and model.dim == DIM and model.inner.dim == DIM + 1
    for t, (x, v) in enumerate(zip(X, y, strict=True)):
        z = model._transform(x)
        if t == 0:
            expected = np.zeros(DIM)
        else:
            past = X[:t]
            sd = past.std(axis=0)
            safe = np.where(sd > 0, sd, 1.0)
            expected = np.where(sd > 0, (x - past.mean(axis=0)) / safe, 0.0)
        np.testing.assert_allclose(z[:DIM], np.clip(expected, -3.0, 3.0), rtol=1e-9, atol=1e-9)
        assert z[DIM] == 1.0
        model.learn(x, v)
    assert model.welford_n_ == len(X)


def test_clip_alone_clips_raw_values_and_keeps_dim() -> None:
    model = learners.build("pa", 3, preprocess={"clip": 2.0})
    assert model.inner.dim == 3  # type: ignore[attr-defined]
    x = np.array([5.0, -0.5, -9.0])
    np.testing.assert_array_equal(model._transform(x), [2.0, -0.5, -2.0])  # type: ignore[attr-defined]
    np.testing.assert_array_equal(x, [5.0, -0.5, -9.0])  # the caller's x is not touched


@pytest.mark.parametrize("kind", KINDS)
def test_replay_through_a_checkpoint_is_bit_identical(kind: str) -> None:
    X, y = stream(kind)
    pre = options_for(kind)
    whole = learners.build(kind, DIM, preprocess=pre)
    straight = [whole.learn(x, v).prediction for x, v in zip(X, y, strict=True)]

    first = learners.build(kind, DIM, preprocess=pre)
    half = len(X) // 2
    got = [first.learn(x, v).prediction for x, v in zip(X[:half], y[:half], strict=True)]
    resumed = load_state(decode_state(encode_state(first.state())))
    assert isinstance(resumed, Preprocessed)
    got += [r.prediction for r in resumed.learn_many(X[half:], y[half:])]
    assert got == straight  # exact: floats compared bit for bit
    assert encode_state(resumed.state()) == encode_state(whole.state())


@pytest.mark.parametrize("kind", KINDS)
def test_learn_many_equals_the_loop_bit_for_bit(kind: str) -> None:
    X, y = stream(kind, n=150)
    pre = options_for(kind)
    a = learners.build(kind, DIM, preprocess=pre)
    b = learners.build(kind, DIM, preprocess=pre)
    ra = a.learn_many(X[:70], y[:70]) + a.learn_many(X[70:], y[70:])
    rb = [b.learn(x, v) for x, v in zip(X, y, strict=True)]
    assert [r.prediction for r in ra] == [r.prediction for r in rb]
    assert [r.loss for r in ra] == [r.loss for r in rb]
    assert encode_state(a.state()) == encode_state(b.state())
    assert [p.value for p in a.predict_many(X[:20])] == [a.predict(x).value for x in X[:20]]


def test_predict_and_rejected_events_leave_welford_untouched() -> None:
    X, y = stream("vaw", n=40)
    model = learners.build("vaw", DIM, preprocess=FULL)
    model.learn_many(X[:30], y[:30])
    before = encode_state(model.state())
    model.predict(X[30])
    model.predict_many(X[30:])
    bad_x = X[30].copy()
    bad_x[1] = np.nan
    for call in (
        lambda: model.learn(bad_x, 1.0),
        lambda: model.learn(X[30], float("nan")),
        lambda: model.learn(X[30][:-1], 1.0),
        lambda: model.learn_many(np.vstack([X[30], bad_x]), [1.0, 1.0]),
        lambda: model.learn_many(X[30:32], [1.0, "two"]),
        lambda: model.learn_many(X[30:32], [1.0]),
    ):
        with pytest.raises(ValueError):
            call()
        assert encode_state(model.state()) == before


def test_interrupted_batch_advances_welford_by_the_rows_learned(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    X, y = stream("vaw", n=10)
    a = learners.build("vaw", DIM, preprocess=FULL)
    b = learners.build("vaw", DIM, preprocess=FULL)
    inner = a.inner  # type: ignore[attr-defined]
    real, calls = inner._learn, {"n": 0}

    def failing(x, v, h):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 4:
            raise ValueError("step failed")
        return real(x, v, h)

    monkeypatch.setattr(inner, "_learn", failing)
    with pytest.raises(BatchInterrupted) as info:
        a.learn_many(X, y)
    assert info.value.index == 3
    for x, v in zip(X[:3], y[:3], strict=True):
        b.learn(x, v)
    assert_states_equal(a.state(), b.state())
    assert a.welford_n_ == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kind", "pre", "words"),
    [
        ("apas", {"standardize": True}, "portfolio weights on raw returns"),
        ("apas", {"intercept": True}, "portfolio weights on raw returns"),
        ("apas", {"clip": 1.0}, "portfolio weights on raw returns"),
        ("transductive", {"standardize": True}, "registered block"),
        ("transductive-logistic", {"intercept": True}, "registered block"),
        ("nemsis", {"intercept": True}, "fit_intercept"),
        ("pa", {"center": True}, "unknown option"),
        ("pa", {"standardize": "yes"}, "'standardize' must be"),
        ("pa", {"clip": 0}, "'clip' must be a positive"),
        ("pa", {"clip": float("inf")}, "'clip' must be a positive"),
        ("pa", [1], "must be an object"),
        ("dvaw-ensemble", {"intercept": True}, "no room for the intercept column"),
    ],
)
def test_refusals_and_bad_options_are_clear(kind: str, pre: object, words: str) -> None:
    dim = learners.REGISTRY[kind].max_dim if "room" in words else DIM
    with pytest.raises(ValueError, match=words):
        learners.build(kind, dim, preprocess=pre)
    with pytest.raises(ValueError, match=words):
        learners.state_size(kind, dim, None, pre)


@pytest.mark.parametrize("pre", [None, {}, {"standardize": False, "intercept": None}])
def test_no_step_switched_on_builds_the_bare_learner(pre: object) -> None:
    model = learners.build("pa", DIM, preprocess=pre)
    assert type(model) is learners.REGISTRY["pa"]
    assert "preprocess" not in model.state()


@pytest.mark.parametrize("kind", ["vaw", "dvaw-ensemble", "nemsis"])
def test_state_size_bounds_the_wrapped_arrays(kind: str) -> None:
    X, y = stream(kind, n=50)
    pre = options_for(kind)
    declared = learners.state_size(kind, DIM, None, pre)
    model = learners.build(kind, DIM, preprocess=pre)
    model.learn_many(X, y)
    held = sum(v.nbytes for v in model.state().values() if isinstance(v, np.ndarray))
    bare = learners.state_size(kind, DIM + int("intercept" in pre)).bytes
    assert bare < declared.bytes and held <= declared.bytes
    assert "standardisation" in declared.formula


def test_wrapper_answers_as_the_inner_learner() -> None:
    model = learners.build("arow", DIM, preprocess=FULL)
    assert (model.kind, model.task) == ("arow", "classification")
    assert model.weights.shape == (DIM + 1,)  # type: ignore[attr-defined]
    X, y = stream("arow", n=30)
    model.learn_many(X, y)
    inner = model.inner  # type: ignore[attr-defined]
    for name in ("predict_proba", "quantify"):
        assert hasattr(model, name) == hasattr(inner, name)
    if hasattr(inner, "predict_proba"):  # classifiers gain it in issue 16, item 3
        z = model._transform(X[0])  # type: ignore[attr-defined]
        assert model.predict_proba(X[0]) == inner.predict_proba(z)  # type: ignore[attr-defined]


def test_a_quantifier_quantifies_the_transformed_batch() -> None:
    X, y = stream("nemsis", n=200)
    model = learners.build("nemsis", DIM, preprocess={"standardize": True})
    model.learn_many(X, y)
    model.learn_many(X[:80], [None] * 80)  # unlabelled: the window's prevalence
    inner = model.inner  # type: ignore[attr-defined]
    Z = np.array([model._transform(x) for x in X[:50]])  # type: ignore[attr-defined]
    assert model.quantify(X[:50]) == inner.quantify(Z)  # type: ignore[attr-defined]
    prevalence = model.window_prevalence()  # type: ignore[attr-defined]
    assert 0.0 <= prevalence <= 1.0 and prevalence == inner.window_prevalence()


@pytest.mark.parametrize("kind", sorted(learners.REGISTRY))
def test_every_kinds_default_preprocess_is_one_it_accepts(kind: str) -> None:
    """A spec that omits ``preprocess`` gets the kind's default: it must build."""
    cls = learners.REGISTRY[kind]
    learners.build(kind, DIM, preprocess=cls.preprocess_default)  # raises if refused


def test_the_binary_linear_classifiers_default_to_an_intercept() -> None:
    from learners._classifier import BinaryClassifier

    defaults = {
        kind: cls.preprocess_default
        for kind, cls in learners.REGISTRY.items()
        if cls.preprocess_default is not None
    }
    expected = {
        kind
        for kind, cls in learners.REGISTRY.items()
        if issubclass(cls, BinaryClassifier) and not cls.preprocess_refused
    }
    assert set(defaults) == expected and "arow" in expected
    assert all(d == {"intercept": True} for d in defaults.values())


@pytest.mark.parametrize("drop", ["welford_m2_", "welford_n_", "params", "dim"])
def test_a_state_missing_a_field_is_a_value_error(drop: str) -> None:
    model = learners.build("pa", DIM, preprocess=FULL)
    state = model.state()
    del state[drop]
    with pytest.raises(ValueError, match=f"lacks {drop}"):
        load_state(state)
