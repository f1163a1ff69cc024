"""``/metrics``: per-model event counters and dead-letter total read from Redis (so every API
replica shows the same figures, whichever worker owns a model), plus the API's own request
latency histogram, ``onlinepredict_build_info`` and process metrics."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from service.api.redis_access import RedisAccess
from service.metrics.build import BuildInfoCollector
from service.metrics.exposition import SnapshotCollector
from service.metrics.snapshots import read_snapshots

logger = logging.getLogger(__name__)

LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiMetrics:
    """The API's own metrics, in a registry per app (tests build many apps)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "onlinepredict_http_request_duration_seconds",
            "HTTP request latency by route template.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.redis_up = Gauge(
            "onlinepredict_api_redis_up",
            "1 when the last /metrics scrape could read Redis.",
            registry=self.registry,
        )
        self.registry.register(BuildInfoCollector())  # type: ignore[arg-type]
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._rendering: asyncio.Future[bytes] | None = None

    async def render(self, store: RedisAccess) -> bytes:
        """Exposition text; model figures are left out (and logged) while Redis is down.

        Scrapes that arrive while one is being rendered wait for that one and share its
        text (one render at a time per process, never an older one): concurrent scrapers
        cost one render instead of one each (docs/security.md, "Limits")."""
        if self._rendering is not None:
            return await asyncio.shield(self._rendering)
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._rendering = future
        try:
            text = await self._render(store)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        else:
            future.set_result(text)
            return text
        finally:
            self._rendering = None

    async def _render(self, store: RedisAccess) -> bytes:
        models: bytes = b""
        try:
            snapshots = await read_snapshots(store.redis, store.keys)
            deadletters = await store.deadletters()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail with Redis down
            logger.warning("/metrics: cannot read Redis: %s", exc)
            self.redis_up.set(0)
        else:
            self.redis_up.set(1)
            one_shot = CollectorRegistry(auto_describe=False)
            one_shot.register(SnapshotCollector(snapshots, deadletters))  # type: ignore[arg-type]
            models = generate_latest(one_shot)
        return generate_latest(self.registry) + models
