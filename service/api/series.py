"""The API's series sampler: every ``series_interval_s`` it reads every model's checkpointed
figures (one pipeline) and appends a point to each model whose checkpoint moved on.

It runs in the API's lifespan whether or not a dashboard is open, so the dashboard shows the
past on open. A shared gate key with a TTL lets one API replica sample per interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from redis.exceptions import RedisError

from service.metrics.snapshots import read_snapshots
from service.store.connect import RedisClient
from service.store.keys import Keys
from service.store.series import SeriesPoint, append_points, pick_values

logger = logging.getLogger(__name__)


class SeriesSampler:
    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        *,
        interval_s: float,
        capacity: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis, self.keys = redis, keys
        self.interval_s, self.capacity, self.clock = interval_s, capacity, clock
        # model -> version of its last point: an idle model's buffer is not filled with
        # copies of one point (after a restart, one repeated point at most)
        self.last_version: dict[str, int] = {}

    async def sample_once(self) -> int:
        """Append a point for every model whose checkpoint version changed; how many."""
        snaps = await read_snapshots(self.redis, self.keys)
        now = self.clock()
        points = [
            (
                s.model,
                SeriesPoint(
                    ts=now,
                    version=s.version,
                    applied=s.counters.get("applied", 0),
                    duplicate=s.counters.get("duplicate", 0),
                    rejected=s.counters.get("rejected", 0),
                    values=pick_values(s.figures, s.diagnostics),
                ),
            )
            for s in snaps
            if s.version > 0 and self.last_version.get(s.model) != s.version
        ]
        if points:
            await append_points(self.redis, self.keys, points, self.capacity)
        self.last_version = {s.model: s.version for s in snaps}
        return len(points)

    async def run(self) -> None:
        """Sample until cancelled; Redis being down only skips samples."""
        gate_ms = max(1, int(self.interval_s * 1000 * 0.9))  # expires before our next turn
        while True:
            try:
                if await self.redis.set(self.keys.series_gate(), b"1", nx=True, px=gate_ms):
                    await self.sample_once()
            except (RedisError, OSError) as exc:
                logger.debug("series sample skipped: %s", exc)
            except Exception:  # a bad stored value must not end sampling for every model
                logger.exception("series sample failed")
            await asyncio.sleep(self.interval_s)
