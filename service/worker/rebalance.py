"""Partition assignment: load the partition's models, void stamps of a reset log, seek.

On assignment (docs/design.md, "Checkpoints"): each partition is sought to the lowest
``offset + 1`` among its models' stamps (a model's origin is its first stamp); a model with
no usable stamp, or no registered model at all, makes it start from the log's beginning
(never from Kafka's committed offset). A stamp is void when the partition now ends at or
before it, or the record at its offset carries another event id (the memory-only broker
restarted): the model keeps its learned state and resumes after the newest known point the
log still holds, or stops learning when that cannot be done exactly (divergence.py).
On revoke: checkpoint everything, then drop the revoked partitions' models.
"""

from __future__ import annotations

import logging

from service.worker.checkpointer import Checkpointer
from service.worker.context import WorkerContext
from service.worker.divergence import EndMemo, resume_offset
from service.worker.ports import TopicPartition
from service.worker.runtime import ModelRuntime, load_models

logger = logging.getLogger(__name__)


class Rebalance:
    """The rebalance listener: checkpoint and drop on revoke, restore and seek on assign."""

    def __init__(self, ctx: WorkerContext, checkpoint: Checkpointer) -> None:
        self.ctx = ctx
        self.checkpoint = checkpoint

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self.ctx.lock:
            self.ctx.assignment.changed()
            if revoked:
                await self.checkpoint.commit()
            await self.checkpoint.drain()  # offsets of revoked partitions before we leave
            parts = {tp.partition for tp in revoked if tp.topic == self.ctx.settings.events_topic}
            for model, rt in list(self.ctx.models.items()):
                if rt.stamp is None or rt.stamp.partition in parts:
                    del self.ctx.models[model]
            self.checkpoint.forget(set(revoked))
            self.ctx.assignment.forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        async with self.ctx.lock:
            self.ctx.assignment.changed()
            await self.checkpoint.drain()  # the offsets of the last checkpoint, before seeking
            self.checkpoint.changed -= assigned  # restored here
            for tp in sorted(assigned):
                await self.restore_partition(tp)
            # A batch fetched while the partitions were being restored comes from the Kafka
            # committed offsets, which can be ahead of the stamps (after a rollback): stale.
            self.ctx.assignment.changed()

    async def restore_partition(self, tp: TopicPartition) -> int:
        """Load ``tp``'s models, void stale stamps and seek; returns the chosen offset."""
        store, log = self.ctx.store, self.ctx.log
        ids = sorted(await store.partition_models(tp.topic, tp.partition))
        loaded, failed = await load_models(store, ids, seen_keep=self.ctx.settings.seen_ids_keep)
        gone = [m for m in failed if m not in loaded]  # deleted: must not pin the seek position
        if gone:
            await store.forget(tp.topic, tp.partition, gone)
        positions: list[int] = []
        reader = EndMemo(log)
        begin = await reader.beginning_offset(tp)
        self.checkpoint.witness.pop(tp, None)
        # lowest stamps first: once one is past the log's end, so are the rest (EndMemo)
        for model, rt in sorted(loaded.items(), key=lambda kv: _offset(kv[1])):
            if rt.foreign(tp.partition):  # registered here once, lives elsewhere: must not pin
                del loaded[model]
                continue
            at = await resume_offset(reader, store, tp, rt, self.ctx.stats)
            if at is None:  # the model stopped learning; it must not pin either
                continue
            positions.append(at)
            s = rt.stamp  # checked against the log: the newest is the partition's witness
            if s is not None and s.offset >= begin:
                w = self.checkpoint.witness.get(tp)
                if w is None or s.offset > w.offset:
                    self.checkpoint.witness[tp] = s
        self.ctx.models.update(loaded)
        # Never Kafka's committed offset: it can be ahead of what Redis holds (a lost first
        # checkpoint), and what lies between would be skipped unlearned. A partition with no
        # registered model is read from its start; the stamps and origins skip what is learned.
        target = min(positions) if positions else begin
        # the records read again below the committed offset were forwarded (forward.py)
        floor = self.ctx.assignment.forward_floor
        floor[tp] = max(floor.get(tp, 0), await log.committed(tp) or 0)
        self.ctx.assignment.seek(tp, target)
        logger.info(
            "assigned %s[%d]: %d models, seek to %d", tp.topic, tp.partition, len(loaded), target
        )
        return target


def _offset(rt: ModelRuntime) -> int:
    return rt.stamp.offset if rt.stamp is not None else -1
