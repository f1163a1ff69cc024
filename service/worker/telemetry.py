"""The worker's process metrics (served by ``service.worker.health`` on ``worker_metrics_port``).

- ``onlinepredict_update_seconds{kind}``: one learn step (``learner.learn`` + the running
  statistics). The worker learns a model's examples of a poll in one ``learn_many``, so
  the batch is timed with a ``perf_counter`` pair and each of its events counts as the
  batch's mean; fixed buckets, ``bisect``, no lock (prometheus_client costs 1.5 us each).
- ``onlinepredict_checkpoint_seconds``: one ``Checkpointer.commit`` (dead letters, model
  states, Kafka offsets, worker counters).
- ``onlinepredict_consumer_lag{partition}``: ``highwater - next offset to process`` for
  each assigned partition. The high watermark is the one of the consumer's last fetch
  response (no broker round trip at scrape time). The broker's ListOffsets(latest) answer
  is NOT used: tansu reports the last batch's *base* offset + 1 there, which under-states
  the end by up to a batch; its fetch responses carry the true high watermark. The lag
  is therefore as fresh as the last fetch (the client fetches continuously while
  assigned) and counts records not yet handed to the learners.
- ``onlinepredict_checkpoint_age_seconds``: seconds since the last checkpoint while events
  are waiting to be checkpointed, 0 when everything handled is persisted; an upper bound
  on the age of the oldest un-checkpointed update (what a crash would replay). Healthy:
  at most about ``commit_interval_s`` plus one batch.
- ``onlinepredict_checkpoint_pending_events``: events handled since that checkpoint.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

UPDATE_BUCKETS_S = (
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0,
)  # fmt: skip
CHECKPOINT_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip


@dataclass
class WorkerStats:
    """Worker-level counters, written to ``worker:{id}`` at each checkpoint."""

    processed: int = 0
    applied: int = 0
    duplicate: int = 0
    rejected: int = 0
    skipped: int = 0  # covered by a stamp (replay after crash or rebalance)
    deadletter: int = 0
    checkpoints: int = 0
    conflicts: int = 0
    voided_stamps: int = 0
    redis_retries: int = 0  # every retry: Redis unreachable or full
    redis_oom_retries: int = 0  # of which Redis refused a write for memory (over maxmemory)
    redis_full: int = 0  # 1 while a write waits for Redis memory (a gauge, not a counter)
    redelivered: int = 0  # records the client handed out twice (dropped)
    log_resets: int = 0  # partitions whose records changed under the worker (audit.py)
    forwarded: int = 0  # records of a model that came on another partition, sent home


class FastHistogram:
    """A single-threaded histogram: ``observe`` is a bisect and three additions."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # last slot: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        # bisect_left: the first bound >= seconds, i.e. the bucket "le" semantics
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def observe_many(self, seconds_each: float, n: int) -> None:
        """``n`` observations of ``seconds_each`` (a batch timed as a whole)."""
        self.counts[bisect_left(self.bounds, seconds_each)] += n
        self.sum += seconds_each * n
        self.count += n

    def buckets(self) -> list[tuple[str, float]]:
        out, acc = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            acc += n
            out.append(("+Inf" if bound == float("inf") else repr(bound), float(acc)))
        return out


class WorkerMetrics:
    """Timings recorded by the worker loop and the checkpoint; read at scrape time."""

    def __init__(self) -> None:
        self.update: dict[str, FastHistogram] = {}  # learner kind -> histogram
        self.checkpoint = FastHistogram(CHECKPOINT_BUCKETS_S)

    def update_histogram(self, kind: str) -> FastHistogram:
        h = self.update.get(kind)
        if h is None:
            h = self.update[kind] = FastHistogram(UPDATE_BUCKETS_S)
        return h


def _histogram(
    name: str, help_text: str, label: str | None, hists: dict[str, FastHistogram]
) -> Metric:
    fam = HistogramMetricFamily(name, help_text, labels=[label] if label else [])
    for value, h in sorted(hists.items()):
        fam.add_metric([value] if label else [], h.buckets(), h.sum)
    return fam


class Progress(Protocol):
    """What the checkpoint age is read from (``service.worker.checkpointer.Checkpointer``)."""

    pending: int  # events handled since the last checkpoint
    last: float  # clock() at the last checkpoint


class TimingCollector:
    """Update/checkpoint histograms, consumer lag and checkpoint age of one worker.
    ``lags`` gives ``(partition, lag)`` pairs (``Assignment.lags``)."""

    def __init__(
        self,
        metrics: WorkerMetrics,
        lags: Callable[[], Iterable[tuple[int, int]]],
        checkpoint: Progress | None,
        clock: Callable[[], float],
    ) -> None:
        self.metrics = metrics
        self.lags = lags
        self.checkpoint = checkpoint
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        yield _histogram(
            "onlinepredict_update_seconds",
            "Duration of one learn step (learner update and running statistics).",
            "kind",
            dict(m.update),
        )
        yield _histogram(
            "onlinepredict_checkpoint_seconds",
            "Duration of one checkpoint (states, stamps, counters, offsets).",
            None,
            {"": m.checkpoint},
        )
        yield self._lag()
        if self.checkpoint is not None:
            cp = self.checkpoint
            age = GaugeMetricFamily(
                "onlinepredict_checkpoint_age_seconds",
                "Seconds since the last checkpoint while events wait for one (0: all persisted).",
            )
            age.add_metric([], max(0.0, self.clock() - cp.last) if cp.pending else 0.0)
            yield age
            pending = GaugeMetricFamily(
                "onlinepredict_checkpoint_pending_events",
                "Events handled since the last checkpoint.",
            )
            pending.add_metric([], float(cp.pending))
            yield pending

    def _lag(self) -> Metric:
        fam = GaugeMetricFamily(
            "onlinepredict_consumer_lag",
            "Records of the partition not yet processed (fetch high watermark - next offset).",
            labels=["partition"],
        )
        for partition, lag in self.lags():
            fam.add_metric([str(partition)], float(lag))
        return fam
