"""Waiting out a Redis outage: retry with capped exponential backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.worker.context import WorkerContext

logger = logging.getLogger(__name__)
T = TypeVar("T")

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, OSError)
STOPPING_GRACE_S = 10.0  # when shutting down, stop waiting for Redis after this long


class RedisUnavailable(RuntimeError):
    """Redis stayed down past the shutdown grace period."""


async def with_redis(ctx: WorkerContext, op: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``op`` until Redis answers. While the worker is stopping, give up after
    ``STOPPING_GRACE_S`` (not checkpointing is safe: the events are replayed)."""
    delay = 0.05
    waited = 0.0
    while True:
        try:
            return await op()
        except REDIS_DOWN as exc:
            ctx.stats.redis_retries += 1
            if ctx.stopping.is_set() and waited >= STOPPING_GRACE_S:
                raise RedisUnavailable(f"{what}: Redis unavailable ({exc})") from exc
            if ctx.stats.redis_retries % 20 == 1:
                logger.warning("%s: Redis unavailable (%s); retrying", what, exc)
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, ctx.settings.redis_retry_max_s)
