"""``learners.streams``: the docstring examples' stream is the loop they used to spell out."""

from __future__ import annotations

import numpy as np

from learners.streams import learn_stream, linear_classes, linear_stream
from learners.vaw import VAW


def _spelled_out(n: int, noise: float, change: int) -> list[tuple[np.ndarray, float]]:
    rng = np.random.default_rng(0)
    rounds = []
    for t in range(n):
        u = np.array([1.0, -1.0]) if t < change else np.array([-1.0, 2.0])
        x = rng.normal(size=2)
        rounds.append((x, float(x @ u + noise * rng.normal()) if noise else float(x @ u)))
    return rounds


def test_the_same_draws_in_the_same_order() -> None:
    for noise in (0.0, 0.1):
        got = list(linear_stream([1.0, -1.0], 50, noise=noise, then=(20, [-1.0, 2.0])))
        want = _spelled_out(50, noise, 20)
        assert [y for _, y in got] == [y for _, y in want]
        assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(got, want, strict=True))


def test_without_a_change_the_weights_hold() -> None:
    got = [y for _, y in linear_stream([1.0, -1.0], 30)]
    assert got == [y for _, y in _spelled_out(30, 0.0, 30)]


def test_learn_stream_returns_the_last_report() -> None:
    a, b = VAW(2), VAW(2)
    last = learn_stream(a, linear_stream([1.0, -1.0], 10))
    reports = [b.learn(x, y) for x, y in linear_stream([1.0, -1.0], 10)]
    assert last == reports[-1]
    assert np.array_equal(a.weights, b.weights)
    assert learn_stream(VAW(2), []) is None


def test_linear_classes_continues_the_generator_it_is_given() -> None:
    rng, again = np.random.default_rng(3), np.random.default_rng(3)
    w = [1.0, -2.0, 0.5]
    first, second = linear_classes(w, 40, rng), linear_classes(w, 10, rng)
    for X, y in (first, second):
        want_X = again.normal(size=(len(y), 3))
        assert np.array_equal(X, want_X)
        assert np.array_equal(y, np.where(want_X @ np.array(w) >= 0, 1, -1))
    assert np.array_equal(linear_classes(w, 5)[0], np.random.default_rng(0).normal(size=(5, 3)))
