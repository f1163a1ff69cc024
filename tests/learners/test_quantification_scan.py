"""CAN exactness, SCAN-NS convergence and SCAN mechanics (``docs/algorithms/nemsis.md``)."""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from learners import quantification as Q
from learners.quantification.scan import SCAN, can_finite, class_and_quant

D = 10


# ---- §7.5 CAN on finite candidate sets ---------------------------------------------------
def test_can_converges_linearly_and_terminates_at_the_optimum() -> None:
    rng = np.random.default_rng(0)
    worst = 0
    for _ in range(200):
        P, N = rng.random(50), rng.random(50)
        p = 0.3
        perf = np.asarray(Q.cqreward_rates(P, N, p))
        best = float(perf.max())
        idx, levels = can_finite(P, N, p, start=int(rng.integers(50)), measure="cqreward")
        d0 = best - levels[0]
        for k, v in enumerate(levels):
            assert best - v <= d0 * 0.5**k + 1e-12  # m/M = 1/2 for CQReward
        assert levels[-1] == pytest.approx(best, abs=1e-12)
        assert len(levels) - 1 <= 10
        worst = max(worst, len(levels) - 1)
    assert worst >= 2  # the runs do iterate


def test_can_rate_for_bkreward_uses_its_range() -> None:
    rng = np.random.default_rng(1)
    for _ in range(100):
        P, N = rng.random(50), rng.random(50)
        p, eps = 0.2, 1e-3
        pc, pq = class_and_quant("bkreward", P, N, p, eps=eps)
        perf = pc / pq
        m, M = 1.0, float(np.max(pq))
        idx, levels = can_finite(P, N, p, measure="bkreward", eps=eps, start=0)
        d0 = float(perf.max()) - levels[0]
        for k, v in enumerate(levels):
            assert float(perf.max()) - v <= d0 * (1 - m / M) ** k + 1e-12
        assert levels[-1] == pytest.approx(float(perf.max()), abs=1e-12)
        assert np.all(np.diff(levels) > 0)
        assert [float(perf[i]) for i in idx] == levels


# ---- SCAN mechanics ----------------------------------------------------------------------
def _stream(seed: int, n: int, p: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)
    y = np.where(rng.random(n) < p, 1, -1)
    return rng.normal(size=(n, D)) + (0.75 * y)[:, None] * u, y, u


def test_epoch_schedule() -> None:
    m = SCAN(D, s0=1000, growth=2.0, level_ratio=0.25, level_min=200)
    assert [m.learn_length(e) for e in range(4)] == [1000, 2000, 4000, 8000]
    assert [m.level_length(e) for e in range(4)] == [250, 500, 1000, 2000]
    assert SCAN(D, s0=100, level_min=200).level_length(0) == 200


@pytest.mark.parametrize("ns", [True, False])
def test_level_phase_freezes_the_model_and_sets_the_level(ns: bool) -> None:
    X, y, _ = _stream(2, 400, 0.3)
    m = SCAN(D, s0=100, level_ratio=0.5, level_min=10, prior=0.3, ns=ns, eps=1e-3)
    assert m.level_ == 0.0 and m.dual_gamma_.tolist() == [1.0, 0.0]  # epoch 0 maximises BA
    m.learn_many(X[:100], [int(v) for v in y[:100]])
    assert m.phase_ == 1 and m.epoch_ == 0
    frozen = m.w_out_.copy()
    assert np.array_equal(frozen, m.w_sum_ / m.t_)  # hand-over = averaged iterate
    hits, counts = {1: 0.0, -1: 0.0}, {1: 0, -1: 0}
    for x, v in zip(X[100:150], y[100:150], strict=True):
        margin = int(v) * float(frozen @ np.append(x, 1.0))
        hits[int(v)] += (margin > 0) if ns else min(1.0, margin)
        counts[int(v)] += 1
        assert m.predict(x).scores == {"margin": float(frozen @ np.append(x, 1.0))}
        m.learn(x, int(v))
        if m.phase_ == 1:
            assert np.array_equal(m.w_out_, frozen)
    assert m.epoch_ == 1 and m.phase_ == 0 and m.t_ == 0
    P = min(1.0, max(0.0, hits[1] / counts[1]))
    N = min(1.0, max(0.0, hits[-1] / counts[-1]))
    assert m.level_ == pytest.approx(float(Q.cqreward_rates(P, N, 0.3)), rel=1e-12)
    assert np.array_equal(m.w_, frozen)  # the next NEMSIS run is warm-started at it
    assert m.dual_gamma_.tolist() == [1.0, m.level_]


def test_level_is_kept_when_a_class_is_missing() -> None:
    X, _, _ = _stream(3, 60, 0.3)
    m = SCAN(D, s0=20, level_min=20, prior=0.3)
    m.learn_many(X[:20], [1, -1] * 10)
    m.learn_many(X[20:40], [-1] * 20)
    assert m.epoch_ == 1 and m.level_ == 0.0


# ---- §7.4.5 SCAN-NS convergence ----------------------------------------------------------
@cache
def _scan_run(measure: str, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    u = rng.normal(size=D)
    u /= np.linalg.norm(u)

    def gen(n: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.where(rng.random(n) < 0.1, 1, -1)
        return rng.normal(size=(n, D)) + (0.75 * y)[:, None] * u, y

    X, y = gen(200_000)
    Xt, yt = gen(50_000)
    model = SCAN(D, measure=measure, s0=2000, prior=float(np.mean(y > 0)), eps=1 / 100_000)
    model.learn_many(X, [int(v) for v in y])
    f = Q.cqreward if measure == "cqreward" else Q.bkreward
    pred = np.where(model.decision_function(Xt) > 0, 1, -1)
    value = float(f(*Q.confusion_counts(yt, pred)))
    proj = Xt @ u
    oracle = max(
        float(f(*Q.confusion_counts(yt, np.where(proj > t, 1, -1))))
        for t in np.quantile(proj, np.linspace(0.001, 0.999, 999))
    )
    return value, oracle


@pytest.mark.slow
@pytest.mark.parametrize("measure", ["cqreward", "bkreward"])
@pytest.mark.parametrize("seed", [0, 1])  # spec: seeds 0..4; the benchmark runs all 5
def test_scan_ns_reaches_the_best_threshold(measure: str, seed: int) -> None:
    value, oracle = _scan_run(measure, seed)
    assert value >= oracle - 0.02, (value, oracle)
