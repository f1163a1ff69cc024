"""The ``ModelStore`` port on Redis: ``service.store``'s functions, each call retried while
Redis is unreachable (docs/reliability.md, "Stopping") or full (it refuses writes over its
``maxmemory``: docs/reliability.md, "When Redis is full")."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.config import Settings
from service.store import registry
from service.store.checkpoints import (
    CONFLICT,
    OK,
    CheckpointWrite,
    HistoryEntry,
    RollbackRecord,
    WriteResult,
    forget_partition_model,
    partition_models,
    read_heads,
    read_history,
    read_history_entry,
    read_rollbacks,
    read_seen_upto,
    read_seens,
    read_states,
    write_checkpoints,
)
from service.store.connect import RedisClient, is_oom, redis_client, store_epoch
from service.store.keys import Keys
from service.store.seen import SeenRecords
from service.worker.ports import StoredModels, StoreUnavailable
from service.worker.refusals import LIST_KEEP, Refusals
from service.worker.telemetry import WorkerStats

logger = logging.getLogger(__name__)
T = TypeVar("T")

# OSError too: a connection refused or reset can surface unwrapped; the cluster errors
# while a failover is under way (a shard without a master, slots moving) pass as well
REDIS_DOWN = cast(  # SlotNotCoveredError is no RedisError; Retry catches it all the same
    tuple[type[RedisError], ...],
    (
        RedisConnectionError,
        RedisTimeoutError,
        BusyLoadingError,
        OSError,
        ClusterDownError,
        TryAgainError,
        SlotNotCoveredError,
    ),
)
FIRST_DELAY_S = 0.05
# when shutting down, stop waiting for Redis after this share of the stop bound
STOPPING_SHARE = 0.5
WORKER_STATS_TTL_S = 86_400


class StopAwareRetry:
    """Run a Redis operation until Redis answers, with redis-py's ``Retry`` and capped
    ``ExponentialBackoff`` (0.05 s, doubling, up to ``redis_retry_max_s``). While the worker
    is stopping, give up once Redis has been down for half the stop bound (not
    checkpointing is safe: the events are replayed); a stop request wakes the backoff at
    once. ``Retry`` pauses with ``asyncio.sleep``, which nothing can wake, so its own
    backoff is ``NoBackoff`` and the pause is taken in its failure hook instead.

    A write refused for memory (``is_oom``) is retried the same way: the operation runs
    again unchanged (the same checkpoint writes, stamps and tokens), so nothing is lost or
    doubled, and the worker learns on once memory frees. Any other error reply is raised.
    One WARNING when such an episode starts, one INFO when it ends; ``stats.redis_full`` is
    1 meanwhile (the health endpoint then stays 200: waiting for memory is no hang)."""

    def __init__(
        self,
        stats: WorkerStats,
        stopping: asyncio.Event,
        *,
        stop_timeout_s: float,
        max_delay_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.stats = stats
        self.stopping = stopping
        self.clock = clock
        self.grace = STOPPING_SHARE * stop_timeout_s
        errors = (*REDIS_DOWN, ResponseError)  # error replies other than OOM re-raised below
        self.retry = Retry(NoBackoff(), retries=-1, supported_errors=errors)
        self.backoff = ExponentialBackoff(cap=max_delay_s, base=FIRST_DELAY_S / 2)
        self.max_delay_s = max_delay_s
        self.full_since: float | None = None  # clock() when Redis first refused for memory
        self.full_retries = 0  # retries in the current episode

    async def call(self, op: Callable[[], Awaitable[T]], what: str) -> T:
        waited = 0.0
        stopping = self.stopping

        async def pause(exc: Exception, failures: int) -> None:
            nonlocal waited
            oom = is_oom(exc)
            if isinstance(exc, ResponseError) and not oom:
                raise exc
            self.stats.redis_retries += 1
            if oom:
                self._full(what)
            if stopping.is_set() and waited >= self.grace:
                raise StoreUnavailable(f"{what}: Redis unavailable ({exc})") from exc
            if not oom and self.stats.redis_retries % 20 == 1:
                logger.warning("%s: Redis unavailable (%s); retrying", what, exc)
            # 2**failures overflows a float after ~1000 failures; the cap is hit long before
            delay = self.backoff.compute(min(failures, 64))
            started = self.clock()
            if stopping.is_set():
                await asyncio.sleep(min(delay, max(self.grace - waited, 0.0)))
            else:  # a stop request ends the backoff at once
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), delay)
            waited += self.clock() - started

        result = await self.retry.call_with_retry(op, pause, with_failure_count=True)
        if self.full_since is not None:
            self._accepted()
        return result

    def _full(self, what: str) -> None:
        self.stats.redis_oom_retries += 1
        self.full_retries += 1
        if self.full_since is None:
            self.full_since = self.clock()
            self.stats.redis_full = 1
            logger.warning(
                "%s: Redis is full (over its maxmemory, refusing writes); learning waits,"
                " retrying every <= %.1f s until memory frees (docs/reliability.md,"
                ' "When Redis is full")',
                what,
                self.max_delay_s,
            )

    def _accepted(self) -> None:
        assert self.full_since is not None
        logger.info(
            "Redis accepts writes again after %.1f s full (%d retries)",
            self.clock() - self.full_since,
            self.full_retries,
        )
        self.full_since = None
        self.full_retries = 0
        self.stats.redis_full = 0


class RedisStore:
    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        retry: StopAwareRetry,
        *,
        worker_id: str,
        history_keep: int,
        seen_keep: int,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.retry = retry
        self.worker_id = worker_id
        self.history_keep = history_keep
        self.seen_keep = seen_keep

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        worker_id: str,
        stats: WorkerStats,
        stopping: asyncio.Event,
        clock: Callable[[], float],
    ) -> RedisStore:
        redis = redis_client(
            settings,
            socket_connect_timeout=2.0,
            socket_timeout=5.0,
            health_check_interval=5,
        )
        retry = StopAwareRetry(
            stats,
            stopping,
            stop_timeout_s=settings.worker_stop_timeout_s,
            max_delay_s=settings.redis_retry_max_s,
            clock=clock,
        )
        return cls(
            redis,
            Keys(settings.key_prefix),
            retry,
            worker_id=worker_id,
            history_keep=settings.history_keep,
            seen_keep=settings.seen_ids_keep,
        )

    async def load(self, models: Sequence[str]) -> StoredModels:
        r, keys, ids = self.redis, self.keys, list(models)

        async def fetch() -> StoredModels:
            specs = await registry.get_specs(r, keys, ids)
            present = [m for m in ids if m in specs]
            states = await read_states(r, keys, present)
            with_state = [m for m in present if states[m] is not None]
            seen = await read_seens(r, keys, with_state, self.seen_keep)
            return StoredModels(specs, states, seen)

        return await self.retry.call(fetch, "loading models")

    async def write(
        self,
        writes: Sequence[CheckpointWrite],
        *,
        worker_stats: Mapping[str, str],
        deadletters: int,
        refusals: Refusals | None = None,
    ) -> list[WriteResult]:
        also = self._worker_stats(worker_stats, deadletters, refusals)
        return await self.retry.call(lambda: self._write(writes, also), "checkpoint")

    async def _write(
        self, writes: Sequence[CheckpointWrite], also: Callable[[Any], object]
    ) -> list[WriteResult]:
        r, keys = self.redis, self.keys
        results = await write_checkpoints(
            r,
            keys,
            writes,
            history_keep=self.history_keep,
            seen_keep=self.seen_keep,
            worker=self.worker_id,
            extra=also,
        )
        # A retried pipeline may have applied some writes before the connection broke:
        # a conflict whose stored token is this write's is our own write.
        suspects = [w for w, res in zip(writes, results, strict=True) if res.outcome == CONFLICT]
        if suspects:
            stored = await read_states(r, keys, [w.model for w in suspects])
            fixed = {}
            for w in suspects:
                s = stored[w.model]
                if s is not None and w.token and s.token == w.token:
                    fixed[w.model] = s.version
            results = [
                WriteResult(res.model, OK, fixed[res.model]) if res.model in fixed else res
                for res in results
            ]
        return results

    def _worker_stats(
        self, fields: Mapping[str, str], letters: int, refusals: Refusals | None = None
    ) -> Callable[[Any], object]:
        """The commands that write the worker's counters (``worker:{id}``) and add the
        checkpoint's dead letters to the shared count, for the checkpoint's pipeline; and
        each model's new letters and recent refused share (service/worker/refusals.py)."""
        key = self.keys.worker(self.worker_id)
        mapping = dict(fields)
        count_key = self.keys.deadletter_count()
        keys = self.keys

        def queue(pipe: Any) -> None:
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, WORKER_STATS_TTL_S)
            if letters:
                pipe.incrby(count_key, letters)
            if refusals is None:
                return
            for model, listed in refusals.letters.items():
                pipe.lpush(keys.deadletters(model), *listed[-LIST_KEEP:])
                pipe.ltrim(keys.deadletters(model), 0, LIST_KEEP - 1)
            now = time.time()
            for model, (events, refused) in refusals.shares.items():
                share = {"events": events, "refused": refused, "at": now}
                pipe.hset(keys.refused(model), mapping=share)

        return queue

    async def epoch(self) -> str:
        return await self.retry.call(lambda: store_epoch(self.redis), "store epoch")

    async def heads(self, models: Sequence[str]) -> dict[str, tuple[int, str]]:
        return await self.retry.call(
            lambda: read_heads(self.redis, self.keys, list(models)), "model heads"
        )

    async def history_entry(self, model: str, version: int) -> HistoryEntry | None:
        return await self.retry.call(
            lambda: read_history_entry(self.redis, self.keys, model, version), "history"
        )

    async def history(self, model: str) -> list[HistoryEntry]:
        return await self.retry.call(lambda: read_history(self.redis, self.keys, model), "history")

    async def note_halted(self, model: str, reason: str) -> None:
        await self.retry.call(
            lambda: self.redis.hset(self.keys.state(model), "halted", reason), "halted note"
        )

    async def rollbacks(self, model: str) -> list[RollbackRecord]:
        return await self.retry.call(
            lambda: read_rollbacks(self.redis, self.keys, model), "rollback records"
        )

    async def seen_upto(self, model: str, applied: int) -> SeenRecords:
        return await self.retry.call(
            lambda: read_seen_upto(self.redis, self.keys, model, applied, self.seen_keep),
            "seen ids",
        )

    async def partition_models(self, topic: str, partition: int) -> set[str]:
        return await self.retry.call(
            lambda: partition_models(self.redis, self.keys, topic, partition), "partition models"
        )

    async def forget(self, topic: str, partition: int, models: Sequence[str]) -> None:
        async def forget() -> None:
            for m in models:
                await forget_partition_model(self.redis, self.keys, topic, partition, m)

        await self.retry.call(forget, "forget deleted models")

    async def close(self) -> None:
        await self.redis.aclose()
