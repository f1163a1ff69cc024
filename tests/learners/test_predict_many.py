"""The linear regressors' batch prediction (``LinearRegressor.predict_many``): on the
compiled path one ``dot_rows`` call for a float64 matrix, the same floats as ``predict``
row by row; every other input, and every error, as the base's loop."""

from __future__ import annotations

import numpy as np
import pytest

import learners
from learners import _accel
from learners.base import Learner

pytest.importorskip("numba")


def _trained(kind: str, d: int, seed: int) -> Learner:
    learner = learners.build(kind, d)
    X, y = learner._test_stream(d, 300, seed)
    learner.learn_many(X, y)
    return learner


@pytest.mark.parametrize("kind", ["pa", "ogd"])
@pytest.mark.parametrize("d", [1, 3, 20, 100])
def test_one_kernel_call_equals_the_loop_bit_for_bit(
    compiled_path: None, kind: str, d: int
) -> None:
    learner = _trained(kind, d, seed=d)
    rng = np.random.default_rng(d)
    # wide magnitudes: a different summation order would show in the last bits
    X = rng.normal(size=(257, d)) * 10.0 ** rng.integers(-8, 8, size=(257, d))
    many = [p.value for p in learner.predict_many(X)]
    loop = [learner.predict(x).value for x in X]
    assert np.array(many).tobytes() == np.array(loop).tobytes()
    assert all(type(v) is float for v in many)
    # the same answers for the inputs the kernel does not take (lists, a strided view)
    assert [p.value for p in learner.predict_many(X.tolist())] == many
    assert [p.value for p in learner.predict_many(X[::2])] == many[::2]


@pytest.mark.parametrize("kind", ["pa", "ogd"])
def test_predict_values_are_predict_manys_values_or_none(compiled_path: None, kind: str) -> None:
    """The API's compact answer takes ``predict_values`` instead of ``predict_many`` when it
    is not None: the same floats bit for bit, and None wherever the kernel does not serve."""
    learner = _trained(kind, 6, seed=2)
    X = np.random.default_rng(3).normal(size=(50, 6)) * 1e4
    hints = [None] * 50
    values = learner.predict_values(X, hints=hints)  # type: ignore[attr-defined]
    many = np.array([p.value for p in learner.predict_many(X, hints=hints)])
    assert values.dtype == np.float64 and values.tobytes() == many.tobytes()
    for other in (X.tolist(), X[::2], X.astype(np.float32), X[:, :5]):
        assert learner.predict_values(other) is None  # type: ignore[attr-defined]
    assert not hasattr(_trained("rls", 6, seed=2), "predict_values")  # the route's fallback


def test_predict_values_is_none_on_the_numpy_path(numpy_path: None) -> None:
    learner = _trained("pa", 4, seed=5)
    assert learner.predict_values(np.ones((3, 4))) is None  # type: ignore[attr-defined]


def test_the_kernel_is_the_one_used(compiled_path: None, monkeypatch: pytest.MonkeyPatch) -> None:
    learner = _trained("pa", 5, seed=0)
    calls: list[int] = []
    kernels = _accel.get()
    real = kernels.dot_rows

    def counting(X, w, out):  # type: ignore[no-untyped-def]
        calls.append(X.shape[0])
        return real(X, w, out)

    monkeypatch.setattr(kernels, "dot_rows", counting)
    learner.predict_many(np.ones((7, 5)))
    assert calls == [7]


@pytest.mark.parametrize("path", ["compiled_path", "numpy_path"])
def test_errors_are_the_loops(path: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(path)
    learner = _trained("pa", 3, seed=1)
    X = np.ones((2, 3))
    with pytest.raises(ValueError, match="same length"):
        learner.predict_many(X, hints=[None])
    with pytest.raises(ValueError, match="hint must be finite"):
        learner.predict_many(X, hints=[None, float("nan")])
    bad = X.copy()
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match="only finite numbers"):
        learner.predict_many(bad, hints=[None, float("nan")])  # rows are checked first
    with pytest.raises(ValueError, match="dimension 3"):
        learner.predict_many(np.ones((2, 4)))
    assert [p.value for p in learner.predict_many(X, hints=[0.5, None])] == [
        learner.predict(x).value for x in X
    ]
