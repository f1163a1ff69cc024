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

import asyncio
import logging

from service.worker.assignment import Assignment
from service.worker.checkpoint import Checkpoint
from service.worker.divergence import find_resume, stamp_is_void
from service.worker.metrics import WorkerStats
from service.worker.models import ModelRuntime, load_models
from service.worker.ports import Log, ModelStore, TopicPartition

logger = logging.getLogger(__name__)


class Rebalance:
    """The rebalance listener: checkpoint and drop on revoke, restore and seek on assign."""

    def __init__(
        self,
        *,
        topic: str,
        store: ModelStore,
        log: Log,
        assignment: Assignment,
        models: dict[str, ModelRuntime],
        stats: WorkerStats,
        checkpoint: Checkpoint,
        lock: asyncio.Lock,
        seen_keep: int,
    ) -> None:
        self.topic = topic
        self.store = store
        self.log = log
        self.assignment = assignment
        self.models = models
        self.stats = stats
        self.checkpoint = checkpoint
        self.lock = lock  # batch vs rebalance callbacks
        self.seen_keep = seen_keep

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self.lock:
            self.assignment.changed()
            if revoked:
                await self.checkpoint.commit()
            await self.checkpoint.drain()  # offsets of revoked partitions before we leave
            parts = {tp.partition for tp in revoked if tp.topic == self.topic}
            for model, rt in list(self.models.items()):
                if rt.stamp is None or rt.stamp.partition in parts:
                    del self.models[model]
            self.checkpoint.forget(set(revoked))
            self.assignment.forget(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        async with self.lock:
            self.assignment.changed()
            await self.checkpoint.drain()  # the offsets of the last checkpoint, before seeking
            for tp in sorted(assigned):
                await self.restore_partition(tp)
            # A batch fetched while the partitions were being restored comes from the Kafka
            # committed offsets, which can be ahead of the stamps (after a rollback): stale.
            self.assignment.changed()

    async def restore_partition(self, tp: TopicPartition) -> int:
        """Load ``tp``'s models, void stale stamps and seek; returns the chosen offset."""
        store, log = self.store, self.log
        ids = sorted(await store.partition_models(tp.topic, tp.partition))
        loaded, failed = await load_models(store, ids, seen_keep=self.seen_keep)
        gone = [m for m in failed if m not in loaded]  # deleted: must not pin the seek position
        if gone:
            await store.forget(tp.topic, tp.partition, gone)
        begin = await log.beginning_offset(tp)
        positions: list[int] = []
        for model, rt in list(loaded.items()):
            if rt.foreign(tp.partition):  # registered here once, lives elsewhere: must not pin
                del loaded[model]
                continue
            s = rt.stamp
            if s is None:
                positions.append(begin)
                continue
            if s.offset >= begin and await stamp_is_void(log, tp, s):
                self.stats.voided_stamps += 1
                resume = await find_resume(log, store, tp, rt)
                if resume.halted is not None:  # must not pin the partition either
                    logger.error("%s", resume.halted)
                    rt.halted = resume.halted
                    await store.note_halted(rt.model, resume.halted)
                    continue
                logger.warning(
                    "model %r: stamp %s is void (the log diverged); resuming after %s",
                    rt.model,
                    s,
                    resume.stamp or "the log's start",
                )
                rt.stamp = resume.stamp
                rt.barrier = None  # a rollback barrier from the old log is void too
                rt.rewind = True
                rt.dirty = True
                positions.append(begin if resume.stamp is None else resume.stamp.offset + 1)
            else:
                positions.append(s.offset + 1)
        self.models.update(loaded)
        # Never Kafka's committed offset: it can be ahead of what Redis holds (a lost first
        # checkpoint), and what lies between would be skipped unlearned. A partition with no
        # registered model is read from its start; the stamps and origins skip what is learned.
        target = min(positions) if positions else begin
        self.assignment.seek(tp, target)
        logger.info(
            "assigned %s[%d]: %d models, seek to %d", tp.topic, tp.partition, len(loaded), target
        )
        return target
