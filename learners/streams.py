"""Seeded synthetic data for the learners' docstring examples.

The linear-regression rounds the regressors' examples stream (``x ~ N(0, I)``,
``y = x . w + noise``, optionally with an abrupt change of ``w``), the loop that learns
them, and the linearly separable batches of the classifiers' examples, so each example
shows only its learner and what it prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from learners.base import Learner, StepReport


def linear_stream(
    weights: Sequence[float],
    n: int,
    *,
    noise: float = 0.0,
    then: tuple[int, Sequence[float]] | None = None,
    seed: int = 0,
) -> Iterator[tuple[np.ndarray, float]]:
    """``n`` rounds ``(x, y)`` with ``x ~ N(0, I)`` and ``y = x . w_t + noise * N(0, 1)``.

    ``w_t`` is ``weights``, or from round ``t0`` on ``w2`` when ``then = (t0, w2)`` (an
    abrupt drift). Draws from ``numpy.random.default_rng(seed)`` in the order ``x`` then its
    noise; with ``noise == 0`` no noise is drawn."""
    rng = np.random.default_rng(seed)
    before = np.array(weights, dtype=float)
    after = before if then is None else np.array(then[1], dtype=float)
    change = n if then is None else then[0]
    for t in range(n):
        w = before if t < change else after
        x = rng.normal(size=len(w))
        y = x @ w + noise * rng.normal() if noise else x @ w
        yield x, float(y)


def learn_stream(model: Learner, stream: Iterable[tuple[Any, Any]]) -> StepReport | None:
    """``model.learn(x, y)`` for each round in order; the last round's report (None when
    the stream is empty)."""
    report = None
    for x, y in stream:
        report = model.learn(x, y)
    return report


def linear_classes(
    weights: Sequence[float], n: int, rng: int | np.random.Generator = 0
) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows ``x ~ N(0, I)`` (one ``(n, d)`` draw) and their labels: +1 where
    ``x . w >= 0``, else -1. ``rng`` is a seed or a generator to continue (so a test batch
    can follow the training one)."""
    X = np.random.default_rng(rng).normal(size=(n, len(weights)))
    return X, np.where(X @ np.array(weights, dtype=float) >= 0, 1, -1)
