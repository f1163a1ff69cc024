"""Partition assignment: load the partition's models, void stamps of a reset log, seek.

On assignment (docs/design.md, "Checkpoints"): each partition is sought to the lowest
``offset + 1`` among its models' stamps (a model's origin is its first stamp); a model with
no usable stamp, or no registered model at all, makes it start from the log's beginning
(never from Kafka's committed offset). A stamp is void when the partition now ends at or
before it, or the record at its offset carries another event id (the memory-only broker
restarted): the model keeps its learned state and learns the new log from its start.
On revoke: checkpoint everything, then drop the revoked partitions' models.
"""

from __future__ import annotations

import logging

from aiokafka import ConsumerRebalanceListener
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.structs import TopicPartition

from service.store.checkpoints import Stamp, forget_partition_model, partition_models
from service.worker.checkpoint import Checkpoint
from service.worker.context import WorkerContext
from service.worker.events import raw_event_id
from service.worker.loading import load_models
from service.worker.retry import with_redis

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_MS = 2000
PROBE_ATTEMPTS = 5


async def stamp_is_void(ctx: WorkerContext, tp: TopicPartition, stamp: Stamp) -> bool:
    """True when the log no longer holds the stamp's event at the stamp's offset.

    Reads the record itself (the probe's auto_offset_reset is "none", so an offset past
    the end raises instead of jumping): the broker's ListOffsets answer is not trusted, as
    tansu reports the last batch's base offset + 1 there.
    """
    probe = ctx.probe
    probe.assign([tp])
    for _ in range(PROBE_ATTEMPTS):
        probe.seek(tp, stamp.offset)
        try:
            batch = await probe.getmany(tp, timeout_ms=PROBE_TIMEOUT_MS, max_records=1)
        except OffsetOutOfRangeError:
            return True  # past the end of the log (offsets below its start are handled)
        records = batch.get(tp, [])
        if records:
            rec = records[0]
            if rec.offset != stamp.offset:
                return False  # compacted away: nothing contradicts the stamp
            return raw_event_id(rec.value) != stamp.event_id
        highwater = probe.highwater(tp)
        if highwater is not None and highwater <= stamp.offset:
            return True
    logger.error(
        "could not read %s[%d]@%d; keeping the stamp", tp.topic, tp.partition, stamp.offset
    )
    return False


async def restore_partition(ctx: WorkerContext, tp: TopicPartition) -> int:
    """Load ``tp``'s models, void stale stamps and seek; returns the chosen offset."""
    r, keys, consumer = ctx.redis, ctx.keys, ctx.consumer
    ids = sorted(
        await with_redis(
            ctx, lambda: partition_models(r, keys, tp.topic, tp.partition), "partition models"
        )
    )
    loaded, failed = await load_models(ctx, ids)
    gone = [m for m in failed if m not in loaded]  # deleted: must not pin the seek position

    async def forget() -> None:
        for m in gone:
            await forget_partition_model(r, keys, tp.topic, tp.partition, m)

    if gone:
        await with_redis(ctx, forget, "forget deleted models")
    begin = (await consumer.beginning_offsets([tp]))[tp]
    positions: list[int] = []
    for model, rt in list(loaded.items()):
        if rt.foreign(tp.partition):  # registered here once, lives elsewhere: must not pin
            del loaded[model]
            continue
        s = rt.stamp
        if s is None:
            positions.append(begin)
            continue
        if s.offset >= begin and await stamp_is_void(ctx, tp, s):
            logger.warning(
                "model %r: stamp %s is void (the log was reset); relearning the log", rt.model, s
            )
            ctx.stats.voided_stamps += 1
            rt.stamp = None
            rt.barrier = None  # a rollback barrier from the old log is void too
            rt.rewind = True
            positions.append(begin)
        else:
            positions.append(s.offset + 1)
    ctx.models.update(loaded)
    # Never Kafka's committed offset: it can be ahead of what Redis holds (a lost first
    # checkpoint), and what lies between would be skipped unlearned. A partition with no
    # registered model is read from its start; the stamps and origins skip what is learned.
    target = min(positions) if positions else begin
    consumer.seek(tp, target)
    ctx.next_offset[tp] = target
    logger.info(
        "assigned %s[%d]: %d models, seek to %d", tp.topic, tp.partition, len(loaded), target
    )
    return target


class RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, ctx: WorkerContext, checkpoint: Checkpoint) -> None:
        self.ctx = ctx
        self.checkpoint = checkpoint

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        ctx = self.ctx
        async with ctx.lock:
            ctx.generation += 1
            if revoked:
                await self.checkpoint.commit()
            await self.checkpoint.drain()  # offsets of revoked partitions before we leave
            parts = {tp.partition for tp in revoked if tp.topic == ctx.settings.events_topic}
            for model, rt in list(ctx.models.items()):
                if rt.stamp is None or rt.stamp.partition in parts:
                    del ctx.models[model]
            self.checkpoint.forget(set(revoked))
            for tp in revoked:
                ctx.next_offset.pop(tp, None)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        ctx = self.ctx
        async with ctx.lock:
            ctx.generation += 1
            await self.checkpoint.drain()  # restore_partition may read the committed offset
            for tp in sorted(assigned):
                await restore_partition(ctx, tp)
            # A batch fetched while the partitions were being restored comes from the Kafka
            # committed offsets, which can be ahead of the stamps (after a rollback): stale.
            ctx.generation += 1
