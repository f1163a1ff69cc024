"""The worker's own HTTP endpoint (``worker_metrics_port`` > 0): ``/healthz`` and ``/metrics``.

``/healthz`` answers 200 while the poll loop turns (a worker stuck waiting for an
unreachable Redis longer than ``STALE_S`` answers 503; one waiting for a full Redis to free
memory answers 200, ``ok: waiting for Redis memory``); ``/metrics`` exposes the worker's
counters, the update/checkpoint latency histograms, consumer lag and checkpoint age
(``service.worker.telemetry``), ``onlinepredict_build_info`` and the process metrics
(``?name[]=`` picks samples by name). The per-model learning metrics come from the API's
``/metrics`` (they live in Redis).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import RestrictedRegistry

from service.metrics.build import BuildInfoCollector
from service.worker.telemetry import Progress, TimingCollector, WorkerMetrics, WorkerStats

logger = logging.getLogger(__name__)

STALE_S = 60.0
_OUTCOMES = ("applied", "duplicate", "rejected", "skipped", "redelivered")


class Watched(Protocol):
    """What the endpoint reads of a worker (``service.worker.loop.Worker``)."""

    @property
    def stats(self) -> WorkerStats: ...
    @property
    def models(self) -> Mapping[str, Windowed]: ...
    @property
    def metrics(self) -> WorkerMetrics: ...
    @property
    def checkpoint(self) -> Progress: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def last_poll(self) -> float:
        """clock() at the last poll."""

    def lags(self) -> Iterable[tuple[int, int]]: ...


class Windowed(Protocol):
    """What the endpoint reads of a model (``service.worker.runtime.ModelRuntime``)."""

    @property
    def evicted(self) -> int: ...

    def dedupe_horizon(self, now: float) -> tuple[int, float]: ...


class WorkerCollector:
    def __init__(self, worker: Watched) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        st = self.worker.stats
        records = CounterMetricFamily(
            "onlinepredict_worker_records", "Records handled by this worker.", labels=["outcome"]
        )
        for outcome in _OUTCOMES:
            records.add_metric([outcome], float(getattr(st, outcome)))
        yield records
        for name, help_text in (
            ("checkpoints", "Checkpoints written."),
            ("deadletter", "Events this worker sent to the dead-letter topic."),
            (
                "conflicts",
                "Checkpoint writes that lost the version check, and models reloaded"
                " after the store lost writes.",
            ),
            ("voided_stamps", "Stamps found void (the log was reset)."),
            ("log_resets", "Partitions whose records changed under the running worker."),
            (
                "forwarded",
                "Records of a model that came on another partition than its home,"
                " forwarded (produced) to its home partition with their ids.",
            ),
            ("redis_retries", "Redis operations retried while Redis was unreachable or full."),
            (
                "redis_oom_retries",
                "Redis operations retried because Redis refused a write for memory"
                " (over its maxmemory).",
            ),
        ):
            fam = CounterMetricFamily(f"onlinepredict_worker_{name}", help_text)
            fam.add_metric([], float(getattr(st, name)))
            yield fam
        models = GaugeMetricFamily("onlinepredict_worker_models", "Models held in memory.")
        models.add_metric([], float(len(self.worker.models)))
        yield models
        yield from self._dedupe()

    def _dedupe(self) -> Iterator[Metric]:
        """The dedupe horizon of each model this worker holds (docs/reliability.md,
        "Duplicates"); ids dropped as duplicates are ``onlinepredict_events_total``."""
        ids = GaugeMetricFamily(
            "onlinepredict_dedupe_horizon_events",
            "Ids in the model's dedupe window: a re-sent id among them is dropped.",
            labels=["model"],
        )
        age = GaugeMetricFamily(
            "onlinepredict_dedupe_horizon_seconds",
            "Seconds since the oldest id in the dedupe window was applied (at least): a"
            " re-send within this time is dropped.",
            labels=["model"],
        )
        evicted = CounterMetricFamily(
            "onlinepredict_dedupe_evicted",
            "Ids that left the dedupe window in this worker: re-sent now, they are learned again.",
            labels=["model"],
        )
        now = time.time()
        # no isinstance against a runtime-checkable Protocol: it cost ~20 us per model, a
        # third of a scrape at 100 models (benchmarks/README.md, "Larger polls")
        for model, rt in sorted(self.worker.models.items()):
            n, seconds = rt.dedupe_horizon(now)
            ids.add_metric([model], float(n))
            age.add_metric([model], seconds)
            evicted.add_metric([model], float(rt.evicted))
        yield from (ids, age, evicted)


def worker_registry(worker: Watched) -> CollectorRegistry:
    """Everything a worker's ``/metrics`` shows."""
    # collectors without names take part in a ``name[]``-restricted scrape (they are collected
    # and their samples filtered), as prometheus_client's own handlers allow
    registry = CollectorRegistry(auto_describe=False, support_collectors_without_names=True)
    registry.register(WorkerCollector(worker))  # type: ignore[arg-type]
    timing = TimingCollector(worker.metrics, worker.lags, worker.checkpoint, worker.clock)
    registry.register(timing)  # type: ignore[arg-type]
    registry.register(BuildInfoCollector())  # type: ignore[arg-type]
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def _restricted(registry: CollectorRegistry, path: str) -> CollectorRegistry | RestrictedRegistry:
    """The samples a scrape asks for by ``?name[]=...`` (prometheus_client's convention): a
    benchmark that follows one count 20 times a second costs the worker ~0.5 ms per scrape
    instead of ~1.7 at 100 models (benchmarks/README.md, "Larger polls")."""
    names = parse_qs(urlsplit(path).query).get("name[]")
    return registry.restricted_registry(names) if names else registry


async def serve_health(worker: Watched, port: int, host: str = "0.0.0.0") -> asyncio.Server:
    registry = worker_registry(worker)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = request.decode(errors="replace").split()
            path = parts[1] if len(parts) > 1 else "/"
            if path.startswith("/metrics"):
                status, body, ctype = (
                    "200 OK",
                    generate_latest(_restricted(registry, path)),
                    "text/plain; version=0.0.4",
                )
            elif path.startswith("/healthz"):
                # waiting for a full Redis to free memory is no hang: a restart cannot help
                full = worker.stats.redis_full > 0
                fresh = full or worker.clock() - worker.last_poll < STALE_S
                status = "200 OK" if fresh else "503 Service Unavailable"
                body = b"ok: waiting for Redis memory\n" if full else b"ok\n"
                body, ctype = (body if fresh else b"stalled\n"), "text/plain"
            else:
                status, body, ctype = "404 Not Found", b"not found\n", "text/plain"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + body)
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    logger.info("worker health/metrics on %s:%d", host, port)
    return server
