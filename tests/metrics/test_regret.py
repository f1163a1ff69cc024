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


# ---- batched updates: the same bits as the loop --------------------------------------------
@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("d", [1, 2, 3, 8, 20, 150])
def test_regret_update_many_equals_the_loop_bit_for_bit(d: int, compiled: bool) -> None:
    """On the compiled sums (learners/_kernels.py ``outer_sums``) and the numpy stack."""
    from learners import _accel

    if compiled and not _accel.available():
        pytest.skip("numba is not installed")
    _accel.use(compiled)
    try:
        _update_many_equals_the_loop(d)
    finally:
        _accel.use(None)


def _update_many_equals_the_loop(d: int) -> None:
    from service.metrics.regret import RegretTracker

    rng = np.random.default_rng(d)
    k = 700 if d < 100 else 60  # d=150: several stack chunks
    X = rng.normal(size=(k, d)) * rng.lognormal(sigma=3.0, size=(k, 1))  # mixed magnitudes
    y = (X @ rng.normal(size=d) + rng.normal(size=k)).tolist()
    p = (rng.normal(size=k) * 5).tolist()
    loop, many = RegretTracker(d), RegretTracker(d)
    for x, yt, pt in zip(X, y, p, strict=True):
        loop.update(x, yt, pt)
    many.update_many(X[:5], y[:5], p[:5])  # two calls: the cut does not matter either
    many.update_many(X[5:], y[5:], p[5:])
    assert np.array_equal(loop.A_, many.A_) and np.array_equal(loop.b_, many.b_)
    assert (loop.c_, loop.loss_) == (many.c_, many.loss_)
    assert loop.regret() == many.regret()


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_running_stats_update_many_equals_the_loop(task: str) -> None:
    from learners.base import make_report
    from learners.codec import encode_state
    from service.metrics.running import RunningStats

    rng = np.random.default_rng(7)
    k, d = 250, 4
    X = rng.normal(size=(k, d))
    if task == "regression":
        ys: list[object] = rng.normal(size=k).tolist()
        reports = [
            make_report(float(v), float(v) ** 2, {"turnover": abs(float(v)), "eps": float(v)})
            for v in rng.normal(size=k)
        ]
    else:
        ys = [None if v == 0 else int(v) for v in rng.choice([-1, 0, 1], size=k)]
        reports = [make_report(1, float(rng.random() < 0.3), {"hinge": 0.5}) for _ in range(k)]
    loop, many = RunningStats(task, d, window=16), RunningStats(task, d, window=16)
    for x, y, r in zip(X, ys, reports, strict=True):
        loop.update(x, y, r.prediction, r.loss, r.diagnostics)
    many.update_many(X[:100], ys[:100], reports[:100])
    many.update_many(X[100:], ys[100:], reports[100:])
    assert encode_state(loop.state()) == encode_state(many.state())
    assert loop.figures() == many.figures()


@pytest.mark.parametrize("task", ["regression", "classification"])
@pytest.mark.parametrize("window", [3, 16])
@pytest.mark.parametrize("d", [4, 300])  # 300: above REGRET_MAX_DIM, no regret sums
def test_running_stats_update_many_per_block_equals_the_loop(
    task: str, window: int, d: int
) -> None:
    """The block path (every event labelled, no portfolio figures): scalar sums, the
    error ring across wrap-arounds and the hinge sums, bit for bit, wherever blocks cut."""
    from learners.base import make_report
    from learners.codec import encode_state
    from service.metrics.running import RunningStats

    rng = np.random.default_rng(11)
    k = 240
    X = rng.normal(size=(k, d))
    scale = 10.0 ** rng.integers(-6, 6, size=k)  # magnitudes apart: order matters in sums
    if task == "regression":
        ys: list[object] = (rng.normal(size=k) * scale).tolist()
        reports = [
            make_report(float(v), float(v) ** 2, {"eps": 0.1}) for v in rng.normal(size=k) * scale
        ]
    else:
        ys = [int(v) for v in rng.choice([-1, 1], size=k)]
        hinge = [{"hinge": float(h)} for h in rng.random(k) * scale]
        hinge[5], hinge[9] = {"hinge": float("nan")}, {}  # skipped, as the loop skips them
        reports = [make_report(1, float(rng.random() < 0.3), h) for h in hinge]
    loop, many = RunningStats(task, d, window=window), RunningStats(task, d, window=window)
    for x, y, r in zip(X, ys, reports, strict=True):
        loop.update(x, y, r.prediction, r.loss, r.diagnostics)
    cuts = [0, 1, 3, 40, 41, 120, k]
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        many.update_many(X[lo:hi], ys[lo:hi], reports[lo:hi])
    assert encode_state(loop.state()) == encode_state(many.state())
    assert loop.figures() == many.figures()
