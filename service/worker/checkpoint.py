"""``Checkpoint``: when and how a worker persists its progress (docs/design.md, "Checkpoints")."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from service.store.checkpoints import (
    BACKWARDS,
    CONFLICT,
    OK,
    CheckpointWrite,
    StampWentBackwards,
    read_states,
    write_checkpoints,
)
from service.worker.context import WorkerContext
from service.worker.loading import resync_model
from service.worker.retry import with_redis

logger = logging.getLogger(__name__)

WORKER_STATS_TTL_S = 86_400


class Checkpoint:
    """Tracks the offsets handled since the last checkpoint and writes the next one."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.offsets: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self.pending = 0  # records handled since the last checkpoint
        self.last = ctx.clock()
        self.inflight: asyncio.Future[None] | None = None  # the Kafka offset commit
        self.state_writes = 0  # checkpoints whose Redis write succeeded

    def note(self, tp: TopicPartition, offset: int) -> None:
        self.offsets[tp] = offset + 1
        self.pending += 1

    def expired(self) -> bool:
        """After ``commit_every`` records or ``commit_interval_s`` seconds with work."""
        if not self.pending:
            return False
        st = self.ctx.settings
        return self.pending >= st.commit_every or self.ctx.clock() - self.last >= (
            st.commit_interval_s
        )

    def forget(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self.offsets.pop(tp, None)

    async def commit(self) -> None:
        """Persist progress, in this order:

        1. flush the dead letters (so none is lost once its offset is committed);
        2. write each touched model's state + stamp + counters (one atomic script per
           model) and the worker's own counters, all in one pipeline;
        3. on a lost version check, reload that model from Redis and replay its partition;
        4. commit the Kafka offsets (a hint for lag monitoring only), in the background:
           the next batch does not wait for the broker's answer.
        """
        ctx = self.ctx
        ctx.faults.hit("before_checkpoint")
        started = time.perf_counter()
        # 1. dead letters (the shared counter is at-least-once, like the letters)
        letters = await ctx.deadletters.flush()
        ctx.stats.deadletter += letters
        # 2. model states, worker counters
        dirty = [rt for rt in ctx.models.values() if rt.dirty and rt.stamp is not None]
        writes = [rt.checkpoint_write(ctx.settings.events_topic) for rt in dirty]
        ctx.stats.checkpoints += 1
        also = self._worker_stats(letters)
        results = await with_redis(ctx, lambda: self._write(writes, also), "checkpoint")
        conflicted: set[int] = set()
        for rt, w, res in zip(dirty, writes, results, strict=True):
            if res.outcome == OK:
                rt.written(res.version)
            elif res.outcome == BACKWARDS:
                raise StampWentBackwards(
                    f"model {rt.model!r}: stamp {w.stamp} is behind the stored one"
                )
            else:
                ctx.stats.conflicts += 1
                conflicted.add(w.stamp.partition)
                # 3. another writer won: its state is the truth
                await resync_model(ctx, rt.model)
        self.state_writes += 1
        ctx.faults.hit("after_state_write")
        # 4. Kafka offsets
        await self._commit_offsets(conflicted)
        ctx.faults.hit("after_commit")
        self.pending = 0
        self.last = ctx.clock()
        elapsed = time.perf_counter() - started
        ctx.metrics.checkpoint.observe(elapsed)
        logger.debug("checkpoint: %d models in %.1f ms", len(writes), 1e3 * elapsed)

    async def _write(  # type: ignore[no-untyped-def]
        self, writes: list[CheckpointWrite], also: Callable[[Any], object]
    ):
        ctx = self.ctx
        results = await write_checkpoints(
            ctx.redis,
            ctx.keys,
            writes,
            history_keep=ctx.settings.history_keep,
            seen_keep=ctx.settings.seen_ids_keep,
            worker=ctx.worker_id,
            extra=also,
        )
        # A retried pipeline may have applied some writes before the connection broke:
        # a conflict whose stored stamp and counters are exactly ours is our own write.
        suspects = [w for w, r in zip(writes, results, strict=True) if r.outcome == CONFLICT]
        if suspects:
            stored = await read_states(ctx.redis, ctx.keys, [w.model for w in suspects])
            fixed = {}
            for w in suspects:
                s = stored[w.model]
                if (
                    s is not None
                    and s.version == w.expected_version + 1
                    and s.stamp == w.stamp
                    and s.counters == w.counters
                ):
                    fixed[w.model] = s.version
            results = [
                type(r)(r.model, OK, fixed[r.model]) if r.model in fixed else r for r in results
            ]
        return results

    async def _commit_offsets(self, skip_partitions: set[int]) -> None:
        """Start committing the Kafka offsets without waiting for the broker; a commit
        still running from the last checkpoint is awaited first, so commits never overlap
        and arrive in order. ``drain`` waits for the last one (shutdown, rebalance)."""
        ctx = self.ctx
        assigned = ctx.consumer.assignment()
        offsets = {
            tp: OffsetAndMetadata(off, "")
            for tp, off in self.offsets.items()
            if tp in assigned and tp.partition not in skip_partitions
        }
        await self.drain()
        if offsets:
            self.inflight = asyncio.ensure_future(self._send_offsets(offsets))

    async def drain(self) -> None:
        """Wait for the Kafka offset commit in flight, if any."""
        inflight, self.inflight = self.inflight, None
        if inflight is not None:
            await inflight

    async def _send_offsets(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        try:
            await self.ctx.consumer.commit(offsets)
        except (KafkaError, IllegalStateError) as exc:
            logger.info("Kafka offset commit skipped (%s); Redis stamps are authoritative", exc)

    def _worker_stats(self, letters: int) -> Callable[[Any], object]:
        """The commands that write the worker's counters (``worker:{id}``) and add this
        checkpoint's dead letters to the shared count, for the checkpoint's pipeline."""
        ctx = self.ctx
        key = ctx.keys.worker(ctx.worker_id)
        fields = {**vars(ctx.stats), "pid": os.getpid(), "models": len(ctx.models)}
        mapping: dict[Any, Any] = {k: str(v) for k, v in fields.items()}
        mapping["updated_at"] = repr(time.time())

        def queue(pipe: Any) -> None:
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, WORKER_STATS_TTL_S)
            if letters:
                pipe.incrby(ctx.keys.deadletter_count(), letters)

        return queue
