"""The worker's timing metrics, build info, and the quantifiers' prevalence estimate."""

from __future__ import annotations

import types

import numpy as np
from aiokafka.structs import TopicPartition
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from service.metrics.build import BuildInfoCollector
from service.metrics.exposition import ModelSnapshot, model_families
from service.metrics.running import RunningStats
from service.worker.adapters.memory_log import MemoryBroker, MemoryLog
from service.worker.assignment import Assignment
from service.worker.telemetry import FastHistogram, TimingCollector, WorkerMetrics


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple], float]:  # type: ignore[type-arg]
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_fast_histogram_matches_le_semantics() -> None:
    rng = np.random.default_rng(3)
    values = rng.exponential(0.01, size=500)
    bounds = (0.001, 0.005, 0.01, 0.05)
    h = FastHistogram(bounds)
    for v in [*values, 0.005]:  # a value exactly on a bound belongs to that bucket
        h.observe(float(v))
    allv = np.append(values, 0.005)
    got = dict(h.buckets())
    for b in bounds:
        assert got[repr(b)] == float(np.sum(allv <= b))
    assert got["+Inf"] == len(allv) == h.count
    assert abs(h.sum - float(np.sum(allv))) < 1e-9


class _Quiet:
    """A rebalance listener with nothing to restore."""

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass


async def _assignment(highwater: dict[int, int], positions: dict[int, int]) -> Assignment:
    """Partitions of ``events`` filled up to ``highwater``, fetched once, with the worker's
    next offsets at ``positions``."""
    broker = MemoryBroker({"events": len(highwater)})
    for p, end in highwater.items():
        for _ in range(end):
            broker.append("events", b"{}", partition=p)
    log = MemoryLog(broker)
    await log.subscribe("events", _Quiet())
    await log.rebalance(broker.partitions("events"))
    await log.getmany(timeout_ms=0, max_records=1)  # a fetch answered: high watermarks known
    assignment = Assignment(log)
    for p, o in positions.items():
        assignment.next_offset[TopicPartition("events", p)] = o
    return assignment


async def test_timing_collector_exposes_lag_age_and_histograms() -> None:
    assignment = await _assignment({0: 50, 1: 7, 2: 9}, {0: 40, 1: 7})  # 2: no position yet
    metrics = WorkerMetrics()
    for _ in range(3):
        metrics.update_histogram("pa").observe(2e-5)
    metrics.checkpoint.observe(0.02)
    checkpoint = types.SimpleNamespace(pending=12, last=97.5)
    reg = CollectorRegistry(auto_describe=False)
    collector = TimingCollector(
        metrics, lambda: assignment.lags("events"), checkpoint, lambda: 100.0
    )
    reg.register(collector)  # type: ignore[arg-type]
    got = _samples(reg)
    assert got[("onlinepredict_consumer_lag", (("partition", "0"),))] == 10
    assert got[("onlinepredict_consumer_lag", (("partition", "1"),))] == 0
    assert ("onlinepredict_consumer_lag", (("partition", "2"),)) not in got
    assert got[("onlinepredict_checkpoint_age_seconds", ())] == 2.5
    assert got[("onlinepredict_checkpoint_pending_events", ())] == 12
    key = ("onlinepredict_update_seconds_bucket", (("kind", "pa"), ("le", "2.5e-05")))
    assert got[key] == 3
    assert got[("onlinepredict_update_seconds_count", (("kind", "pa"),))] == 3
    assert got[("onlinepredict_checkpoint_seconds_count", ())] == 1
    checkpoint.pending = 0  # everything persisted: no age
    assert _samples(reg)[("onlinepredict_checkpoint_age_seconds", ())] == 0


def test_build_info_is_one_series() -> None:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(BuildInfoCollector())  # type: ignore[arg-type]
    series = [k for k in _samples(reg) if k[0] == "onlinepredict_build_info"]
    assert len(series) == 1
    assert {name for name, _ in series[0][1]} == {"version", "python"}


def test_nemsis_prevalence_cc_is_the_prevalence_estimate() -> None:
    rs = RunningStats("classification", 2)
    x = np.zeros(2)
    rs.update(x, 1, 1, 0.0, {"labelled": 1.0, "prevalence_cc": 0.25})
    rs.update(x, None, 1, 0.0, {"labelled": 0.0, "prevalence_cc": 0.25})
    assert "quantification_kld" in rs.figures()
    snap = ModelSnapshot("q", "nemsis", figures=rs.figures(), diagnostics=dict(rs.last))
    fams = {f.name: f for f in model_families([snap])}
    values = {s.labels["class"]: s.value for s in fams["onlinepredict_prevalence_estimate"].samples}
    assert values == {"1": 0.25, "-1": 0.75}
