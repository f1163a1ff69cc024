"""A check several learner tests share: a learner restored from its checkpoint continues
bit for bit as the original."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from learners.base import Learner
from learners.codec import decode_state, encode_state


def assert_resumes_bit_identically(
    a: Learner,
    X: np.ndarray,
    y: Sequence[float] | np.ndarray,
    split: int,
    hints: Sequence[float] | np.ndarray | None = None,
) -> None:
    """``a`` learns rows ``[:split]``; a copy restored from ``a.state()`` through the wire
    codec (what the service checkpoints) and ``a`` then learn the rest side by side, and
    every prediction must be equal."""
    h = [None] * len(y) if hints is None else [float(g) for g in hints]
    for x, v, g in zip(X[:split], y[:split], h[:split], strict=True):
        a.learn(x, float(v), hint=g)
    b = type(a).from_state(decode_state(encode_state(a.state())))
    for x, v, g in zip(X[split:], y[split:], h[split:], strict=True):
        assert a.learn(x, float(v), hint=g).prediction == b.learn(x, float(v), hint=g).prediction
