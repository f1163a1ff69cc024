"""Waiting out a Redis outage: retry with capped exponential backoff."""

from __future__ import annotations

import asyncio
import contextlib
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
# when shutting down, stop waiting for Redis after this share of the stop bound
STOPPING_SHARE = 0.5


class RedisUnavailable(RuntimeError):
    """Redis stayed down past the shutdown grace period."""


async def with_redis(ctx: WorkerContext, op: Callable[[], Awaitable[T]], what: str) -> T:
    """Run ``op`` until Redis answers. While the worker is stopping, give up once Redis
    has been down for half the stop bound (not checkpointing is safe: the events are
    replayed); a stop request wakes the backoff at once."""
    delay = 0.05
    waited = 0.0
    grace = STOPPING_SHARE * ctx.settings.worker_stop_timeout_s
    while True:
        try:
            return await op()
        except REDIS_DOWN as exc:
            ctx.stats.redis_retries += 1
            if ctx.stopping.is_set() and waited >= grace:
                raise RedisUnavailable(f"{what}: Redis unavailable ({exc})") from exc
            if ctx.stats.redis_retries % 20 == 1:
                logger.warning("%s: Redis unavailable (%s); retrying", what, exc)
            started = ctx.clock()
            if ctx.stopping.is_set():
                await asyncio.sleep(min(delay, max(grace - waited, 0.0)))
            else:  # a stop request ends the backoff at once
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ctx.stopping.wait(), delay)
            waited += ctx.clock() - started
            delay = min(delay * 2, ctx.settings.redis_retry_max_s)
