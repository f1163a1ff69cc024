"""The cumulative-regret figure against a direct least-squares solve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from learners import build
from learners.codec import decode_state, encode_state
from service.metrics.regret import RegretTracker
from service.metrics.running import RunningStats


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("dim", [1, 3, 20])
def test_regret_matches_direct_lstsq(seed: int, dim: int) -> None:
    rng = np.random.default_rng(seed)
    n = 300
    X = rng.normal(size=(n, dim))
    y = X @ rng.normal(size=dim) + rng.normal(size=n)
    preds = rng.normal(size=n)  # any forecaster: regret is a property of the sequence
    tr = RegretTracker(dim)
    for x, v, p in zip(X, y, preds, strict=True):
        tr.update(x, float(v), float(p))
    u, *_ = np.linalg.lstsq(X, y, rcond=None)
    best = float(np.sum((X @ u - y) ** 2))
    expected = float(np.sum((preds - y) ** 2)) - best
    # The ridge and the c - b^T A^-1 b cancellation cost ~1e-9 of sum(y^2).
    assert tr.regret() == pytest.approx(expected, abs=1e-8 * float(y @ y))


def test_regret_with_fewer_events_than_dimensions_is_defined() -> None:
    rng = np.random.default_rng(0)
    tr = RegretTracker(10)
    for _ in range(3):
        x = rng.normal(size=10)
        tr.update(x, float(x.sum()), 0.0)
    # Three points in 10 dims are interpolated exactly: regret = own loss (up to the ridge).
    assert tr.regret() == pytest.approx(tr.loss_, rel=1e-6)


def test_running_stats_roundtrip_continues_exactly() -> None:
    rng = np.random.default_rng(3)
    model = build("pa", 4, variant="pa2")
    a, b = RunningStats("regression", 4), None
    for t in range(400):
        x = rng.normal(size=4)
        y = float(x @ np.arange(4) + 0.1 * rng.normal())
        rep = model.learn(x, y)
        a.update(x, y, rep.prediction, rep.loss, rep.diagnostics)
        if t == 199:
            b = RunningStats.from_state(decode_state(encode_state(a.state())))
        elif b is not None:
            b.update(x, y, rep.prediction, rep.loss, rep.diagnostics)
    assert b is not None
    assert a.figures() == b.figures()
    fa = a.figures()
    assert math.isclose(fa["rmse"], math.sqrt(a.sq_err / 400))
    assert fa["tracking_error"] == pytest.approx(math.sqrt(a.sq_err) / 400)


def test_classifier_figures_count_mistakes() -> None:
    rs = RunningStats("classification", 2)
    x = np.zeros(2)
    for y, loss in [(1, 0.0), (-1, 1.0), (1, 1.0), (None, 0.0)]:
        rs.update(x, y, 1, loss, {"hinge": 0.5, "prevalence": 0.5})
    f = rs.figures()
    assert f["mistakes"] == 2 and f["cumulative_hinge_loss"] == 1.5
    assert f["true_prevalence"] == pytest.approx(2 / 3)
    assert rs.unlabelled == 1
    assert f["quantification_kld"] > 0
