"""What a checkpoint carries for readers (service/metrics/figures.py) and the dimension
bound on regret tracking (service/metrics/running.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import learners
from learners.codec import decode_state, encode_state
from service.metrics import figures
from service.metrics.running import REGRET_MAX_DIM, RunningStats


def _fed(task: str, dim: int, n: int = 40, seed: int = 0) -> RunningStats:
    stats = RunningStats(task, dim)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        x = rng.normal(size=dim)
        y = float(x.sum())
        stats.update(x, y, 0.5 * y, (0.5 * y) ** 2, {"epsilon": 0.1, "bad": float("nan")})
    return stats


def test_the_stored_figures_are_what_the_statistics_give() -> None:
    stats = _fed("regression", 5)
    learner = learners.build("pa", 5)
    carried = figures.decode(figures.encode(figures.of_model(stats, learner, None)))
    expected = RunningStats.from_state(decode_state(encode_state(stats.state()))).figures()
    assert carried.figures == expected and expected["cumulative_regret"] > 0
    assert carried.diagnostics == {"epsilon": 0.1}  # NaN left out: JSON has none
    assert carried.holdings == []  # not an index tracker


def test_an_index_tracker_carries_its_top_holdings_by_asset_name() -> None:
    learner = learners.build("apas", 4)
    learner.w_ = np.array([0.1, 0.5, 0.0, 0.4])  # type: ignore[attr-defined]
    got = figures.of_model(RunningStats("regression", 4), learner, ["A", "B", "C", "D"])
    assert got.holdings == [("B", 0.5), ("D", 0.4), ("A", 0.1)]
    assert figures.of_model(RunningStats("regression", 4), learner, None).holdings[0] == (
        "x1",
        0.5,
    )


def test_decode_refuses_what_encode_does_not_write() -> None:
    for raw in (b"[]", b"{", json.dumps({"figures": {"a": "x"}}).encode()):
        with pytest.raises(ValueError):
            figures.decode(raw)


def test_regret_is_tracked_up_to_its_dimension_bound_only() -> None:
    assert "cumulative_regret" in _fed("regression", REGRET_MAX_DIM, n=3).figures()
    big = _fed("regression", REGRET_MAX_DIM + 1, n=3)
    assert big.regret is None and "cumulative_regret" not in big.figures()
    assert "A" not in big.state()  # nothing d x d in the checkpoint
    assert big.figures()["labelled_events"] == 3


def test_statistics_saved_with_regret_sums_keep_them_whatever_the_bound() -> None:
    """A model made before the bound (its checkpoint has the sums) goes on reporting."""
    stats = _fed("regression", 3)
    state = stats.state()
    state["dim"] = REGRET_MAX_DIM + 1  # as if it were wider: the sums decide, not the dim
    again = RunningStats.from_state(state)
    assert again.regret is not None
    np.testing.assert_array_equal(again.regret.A_, stats.regret.A_)  # type: ignore[union-attr]
