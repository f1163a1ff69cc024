"""``Checkpoint``: when and how a worker persists its progress (docs/design.md, "Checkpoints")."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from service.config import Settings
from service.store.checkpoints import BACKWARDS, OK
from service.worker.assignment import Assignment
from service.worker.deadletter import DeadLetters
from service.worker.faults import Faults
from service.worker.metrics import WorkerMetrics, WorkerStats
from service.worker.models import ModelRuntime, load_models
from service.worker.ports import CommitFailed, Log, ModelStore, TopicPartition

logger = logging.getLogger(__name__)


class Checkpoint:
    """Tracks the offsets handled since the last checkpoint and writes the next one."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: ModelStore,
        log: Log,
        assignment: Assignment,
        models: dict[str, ModelRuntime],
        stats: WorkerStats,
        deadletters: DeadLetters,
        metrics: WorkerMetrics,
        faults: Faults,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.store = store
        self.log = log
        self.assignment = assignment
        self.models = models
        self.stats = stats
        self.deadletters = deadletters
        self.metrics = metrics
        self.faults = faults
        self.clock = clock
        self.offsets: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self.pending = 0  # records handled since the last checkpoint
        self.last = clock()
        self.inflight: asyncio.Future[None] | None = None  # the Kafka offset commit
        self.state_writes = 0  # checkpoints whose Redis write succeeded

    def note(self, tp: TopicPartition, offset: int) -> None:
        self.offsets[tp] = offset + 1
        self.pending += 1

    def expired(self) -> bool:
        """After ``commit_every`` records or ``commit_interval_s`` seconds with work."""
        if not self.pending:
            return False
        st = self.settings
        return self.pending >= st.commit_every or self.clock() - self.last >= (st.commit_interval_s)

    def forget(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self.offsets.pop(tp, None)

    async def commit(self) -> None:
        """Persist progress, in this order:

        1. flush the dead letters (so none is lost once its offset is committed);
        2. write each touched model's state + stamp + counters (one atomic script per
           model) and the worker's own counters, all in one pipeline;
        3. on a lost version check (or a stamp behind the stored one: a stale writer whose
           version number Redis issued again after losing writes), reload that model from
           Redis and replay its partition;
        4. commit the Kafka offsets (a hint for lag monitoring only), in the background:
           the next batch does not wait for the broker's answer.
        """
        self.faults.hit("before_checkpoint")
        started = time.perf_counter()
        # 1. dead letters (the shared counter is at-least-once, like the letters)
        letters = await self.deadletters.flush()
        self.stats.deadletter += letters
        # 2. model states, worker counters
        dirty = [rt for rt in self.models.values() if rt.dirty and rt.stamp is not None]
        writes = [rt.checkpoint_write(self.settings.events_topic) for rt in dirty]
        self.stats.checkpoints += 1
        results = await self.store.write(
            writes, worker_stats=self._worker_stats(), deadletters=letters
        )
        conflicted: set[int] = set()
        for rt, w, res in zip(dirty, writes, results, strict=True):
            if res.outcome == OK:
                rt.written(res.version)
            else:
                if res.outcome == BACKWARDS:  # a zombie whose version number was issued
                    # again after Redis lost writes: the stored state is the truth here too
                    logger.error(
                        "model %r: stamp %s is behind the stored one (a stale writer);"
                        " reloading it",
                        rt.model,
                        w.stamp,
                    )
                self.stats.conflicts += 1
                conflicted.add(w.stamp.partition)
                # 3. another writer won: its state is the truth
                await self.resync(rt.model)
        self.state_writes += 1
        self.faults.hit("after_state_write")
        # 4. Kafka offsets
        await self._commit_offsets(conflicted)
        self.faults.hit("after_commit")
        self.pending = 0
        self.last = self.clock()
        elapsed = time.perf_counter() - started
        self.metrics.checkpoint.observe(elapsed)
        logger.debug("checkpoint: %d models in %.1f ms", len(writes), 1e3 * elapsed)

    async def resync(self, model: str) -> None:
        """Replace the in-memory model by its stored checkpoint and rewind its partition.

        Used when a checkpoint write lost the version check (another writer, a rollback or
        a deletion happened): the stored state wins and the events after its stamp are
        replayed.
        """
        models = self.models
        old = models.pop(model, None)
        loaded, _ = await load_models(self.store, [model], seen_keep=self.settings.seen_ids_keep)
        if model not in loaded:
            logger.warning("model %r is gone from the registry; dropped", model)
            return
        rt = loaded[model]
        models[model] = rt
        ref = rt.stamp or (old.stamp if old else None)
        if ref is None:
            return
        tp = TopicPartition(self.settings.events_topic, ref.partition)
        if tp not in self.log.assignment():
            models.pop(model, None)
            return
        if rt.stamp is not None:
            target = rt.stamp.offset + 1
        else:
            target = await self.log.beginning_offset(tp)
        if target < await self.log.position(tp):
            self.assignment.seek(tp, target)
        logger.warning(
            "model %r reloaded at version %d; replaying from %d", model, rt.version, target
        )

    async def _commit_offsets(self, skip_partitions: set[int]) -> None:
        """Start committing the Kafka offsets without waiting for the broker; a commit
        still running from the last checkpoint is awaited first, so commits never overlap
        and arrive in order. ``drain`` waits for the last one (shutdown, rebalance)."""
        assigned = self.log.assignment()
        offsets = {
            tp: off
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

    async def _send_offsets(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            await self.log.commit(offsets)
        except CommitFailed as exc:
            logger.info("Kafka offset commit skipped (%s); Redis stamps are authoritative", exc)

    def _worker_stats(self) -> dict[str, str]:
        """The worker's counters, as written to ``worker:{id}``."""
        fields = {**vars(self.stats), "pid": os.getpid(), "models": len(self.models)}
        mapping = {k: str(v) for k, v in fields.items()}
        mapping["updated_at"] = repr(time.time())
        return mapping
