"""``Checkpoint``: when and how a worker persists its progress (design.md, "Checkpoints")."""

from __future__ import annotations

import logging
import os
import time
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
           model, pipelined);
        3. on a lost version check, reload that model from Redis and replay its partition;
        4. commit the Kafka offsets (a hint for lag monitoring only);
        5. write the worker's own counters.
        """
        ctx = self.ctx
        ctx.faults.hit("before_checkpoint")
        started = time.perf_counter()
        # 1. dead letters (the shared counter is at-least-once, like the letters)
        letters = await ctx.deadletters.flush()
        if letters:
            ctx.stats.deadletter += letters
            key = ctx.keys.deadletter_count()
            await with_redis(ctx, lambda: ctx.redis.incrby(key, letters), "dead-letter count")
        # 2. model states
        dirty = [rt for rt in ctx.models.values() if rt.dirty and rt.stamp is not None]
        writes = [rt.checkpoint_write(ctx.settings.events_topic) for rt in dirty]
        results = await with_redis(ctx, lambda: self._write(writes), "checkpoint")
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
        ctx.faults.hit("after_state_write")
        # 4. Kafka offsets
        await self._commit_offsets(conflicted)
        ctx.faults.hit("after_commit")
        # 5. worker counters
        ctx.stats.checkpoints += 1
        self.pending = 0
        self.last = ctx.clock()
        await with_redis(ctx, self._write_worker_stats, "worker stats")
        elapsed = time.perf_counter() - started
        ctx.metrics.checkpoint.observe(elapsed)
        logger.debug("checkpoint: %d models in %.1f ms", len(writes), 1e3 * elapsed)

    async def _write(self, writes: list[CheckpointWrite]):  # type: ignore[no-untyped-def]
        ctx = self.ctx
        results = await write_checkpoints(
            ctx.redis,
            ctx.keys,
            writes,
            history_keep=ctx.settings.history_keep,
            seen_keep=ctx.settings.seen_ids_keep,
            worker=ctx.worker_id,
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
        ctx = self.ctx
        assigned = ctx.consumer.assignment()
        offsets = {
            tp: OffsetAndMetadata(off, "")
            for tp, off in self.offsets.items()
            if tp in assigned and tp.partition not in skip_partitions
        }
        if not offsets:
            return
        try:
            await ctx.consumer.commit(offsets)
        except (KafkaError, IllegalStateError) as exc:
            logger.info("Kafka offset commit skipped (%s); Redis stamps are authoritative", exc)

    async def _write_worker_stats(self) -> None:
        ctx = self.ctx
        key = ctx.keys.worker(ctx.worker_id)
        fields = {**vars(ctx.stats), "pid": os.getpid(), "models": len(ctx.models)}
        mapping: dict[Any, Any] = {k: str(v) for k, v in fields.items()}
        mapping["updated_at"] = repr(time.time())
        async with ctx.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, mapping=mapping)
            pipe.expire(key, WORKER_STATS_TTL_S)
            await pipe.execute()
