"""``Checkpointer``: when and how a worker persists its progress (docs/design.md, "Checkpoints")."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from service.store.checkpoints import BACKWARDS, OK, Stamp
from service.worker.context import WorkerContext
from service.worker.divergence import matches, resume_offset
from service.worker.events import raw_event_id
from service.worker.ports import CommitFailed, Record, TopicPartition
from service.worker.refusals import RecentShares, Refusals
from service.worker.runtime import ModelRuntime, load_models

logger = logging.getLogger(__name__)


class Checkpointer:
    """Tracks the offsets handled since the last checkpoint and writes the next one."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx
        self.offsets: dict[TopicPartition, int] = {}  # next offset to commit, per partition
        self.handled: dict[TopicPartition, Record] = {}  # last record handled, per partition
        # the last record handled before the last checkpoint, per partition: the log must
        # still hold it when the next checkpoint is written (service/worker/audit.py)
        self.witness: dict[TopicPartition, Stamp] = {}
        self.suspect: set[TopicPartition] = set()  # records below the next offset came
        self.changed: set[TopicPartition] = set()  # found changed; to restore (audit.py)
        self.pending = 0  # records handled since the last checkpoint
        self.last = ctx.clock()
        self.inflight: asyncio.Future[None] | None = None  # the Kafka offset commit
        self.state_writes = 0  # checkpoints whose Redis write succeeded
        self.shares = RecentShares()  # each model's recent refused share

    def note(self, tp: TopicPartition, rec: Record) -> None:
        self.offsets[tp] = rec.offset + 1
        self.handled[tp] = rec
        self.pending += 1

    def note_run(self, tp: TopicPartition, last: Record, n: int) -> None:
        """``note`` of ``n`` records of ``tp`` in a row, ``last`` the last of them."""
        self.offsets[tp] = last.offset + 1
        self.handled[tp] = last
        self.pending += n

    def expired(self) -> bool:
        """After ``commit_every`` events (a frame counts its rows) or ``commit_interval_s``
        seconds with work."""
        if not self.pending:
            return False
        st = self.ctx.settings
        if self.pending >= st.commit_every:
            return True
        return self.ctx.clock() - self.last >= st.commit_interval_s

    def forget(self, partitions: set[TopicPartition]) -> None:
        for tp in partitions:
            self.offsets.pop(tp, None)
            self.handled.pop(tp, None)
            self.witness.pop(tp, None)

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
        self.ctx.faults.hit("before_checkpoint")
        started = time.perf_counter()
        # 0. nothing learned from a log that changed under us is written
        await self.verify_log()
        # 1. dead letters (the shared counter is at-least-once, like the letters)
        letters = await self.ctx.deadletters.flush()
        self.ctx.stats.deadletter += letters
        # 2. model states, worker counters
        dirty = [rt for rt in self.ctx.models.values() if rt.dirty and rt.stamp is not None]
        writes = [rt.checkpoint_write(self.ctx.settings.events_topic) for rt in dirty]
        self.ctx.stats.checkpoints += 1
        refusals = self._refusals(dirty)
        results = await self.ctx.store.write(
            writes,
            worker_stats=self._worker_stats(),
            deadletters=letters,
            refusals=refusals,
        )
        conflicted: set[int] = set()
        for rt, w, res in zip(dirty, writes, results, strict=True):
            if res.outcome == OK:
                rt.written(res.version, w.token)
            else:
                if res.outcome == BACKWARDS:  # a zombie whose version number was issued
                    # again after Redis lost writes: the stored state is the truth here too
                    logger.error(
                        "model %r: stamp %s is behind the stored one (a stale writer);"
                        " reloading it",
                        rt.model,
                        w.stamp,
                    )
                self.ctx.stats.conflicts += 1
                conflicted.add(w.stamp.partition)
                # 3. another writer won: its state is the truth
                await self.resync(rt.model)
        self.state_writes += 1
        for tp, rec in self.handled.items():
            self.witness[tp] = Stamp(tp.partition, rec.offset, raw_event_id(rec.value))
        self.handled.clear()
        self.ctx.faults.hit("after_state_write")
        # 4. Kafka offsets
        await self._commit_offsets(conflicted)
        self.ctx.faults.hit("after_commit")
        self.pending = 0
        self.last = self.ctx.clock()
        elapsed = time.perf_counter() - started
        self.ctx.metrics.checkpoint.observe(elapsed)
        logger.debug("checkpoint: %d models in %.1f ms", len(writes), 1e3 * elapsed)

    def _refusals(self, dirty: list[ModelRuntime]) -> Refusals:
        """The letters of this checkpoint of the models this worker holds (a record keyed
        by an unknown id lists nothing: no Redis key for a model that does not exist), and
        the recent refused shares worth writing."""
        models = self.ctx.models
        letters = {m: v for m, v in self.ctx.deadletters.take_recent().items() if m in models}
        shares = self.shares.update(
            (rt.model, (rt.counters.applied, rt.counters.rejected), rt.loaded_counts)
            for rt in dirty
        )
        return Refusals(letters, shares)

    async def verify_log(self) -> None:
        """Find the partitions whose records changed under the worker (service/worker/
        audit.py): one probe read per partition with records since the last checkpoint,
        of its witness; for a suspect one, of the newest record handled (a mere repeat of
        the same log leaves it in place). Their models are dropped unwritten and the
        partitions added to ``changed``, for the loop to restore."""
        suspect, self.suspect = self.suspect, set()
        points: dict[TopicPartition, Stamp] = {}
        for tp in set(self.handled) | suspect:
            point = self.witness.get(tp)
            last = self.handled.get(tp)
            if tp in suspect and last is not None:
                point = Stamp(tp.partition, last.offset, raw_event_id(last.value))
            if point is not None:
                points[tp] = point
        if not points:
            return
        found = await self.ctx.log.read_many({tp: p.offset for tp, p in points.items()})
        for tp in sorted(points):
            point = points[tp]
            if matches(found[tp], point) is not False:
                continue
            if point.offset >= await self.ctx.log.beginning_offset(tp):  # not retention
                self.log_changed(tp, point.offset)

    def log_changed(self, tp: TopicPartition, offset: int) -> None:
        """The record at ``offset`` of ``tp`` is not the one handled there before: drop the
        partition's models unwritten and mark it to restore."""
        self.ctx.stats.log_resets += 1
        for model, rt in list(self.ctx.models.items()):
            if rt.home == tp.partition:
                del self.ctx.models[model]  # unwritten: what it learned is read again
        self.forget({tp})
        self.changed.add(tp)
        logger.error(
            "%s[%d] changed under the worker (the record at offset %d is not the one handled"
            " there: its tail was lost and rewritten); its models go back to their checkpoints",
            tp.topic,
            tp.partition,
            offset,
        )

    async def resync(self, model: str, marker: Stamp | None = None) -> None:
        """Replace the in-memory model by its stored checkpoint and rewind its partition.

        Used when a checkpoint write lost the version check (another writer, a rollback or
        a deletion happened), when the store lost writes, or at another incarnation's
        ``marker``: the stored state wins and the events after its stamp are replayed.

        Unless the store holds an incarnation older than one the log or this worker has
        already seen (a Redis restored from before a delete + re-create): replaying would
        meet the newer marker again and reload again, for ever, and the partition's other
        models would never get past it. That model stops learning instead, with the reason
        in its status (docs/reliability.md, "A store older than the log").
        """
        models = self.ctx.models
        old = models.pop(model, None)
        loaded, _ = await load_models(
            self.ctx.store, [model], seen_keep=self.ctx.settings.seen_ids_keep
        )
        if model not in loaded:
            logger.warning("model %r is gone from the registry; dropped", model)
            return
        rt = loaded[model]
        stale = _stale_incarnation(rt, old, marker)
        if stale is not None:
            if old is not None and old.halted is not None and old.origin == rt.origin:
                models[model] = old  # halted for this stored spec already (a re-delivery)
                return
            rt.halted = stale
            models[model] = rt
            logger.error("%s", stale)
            await self.ctx.store.note_halted(model, stale)
            return
        models[model] = rt
        ref = rt.stamp or (old.stamp if old else None)
        if ref is None:
            return
        tp = TopicPartition(self.ctx.settings.events_topic, ref.partition)
        if tp not in self.ctx.log.assignment():
            models.pop(model, None)
            return
        # the stored stamp may be from before the log changed under us: checked as on an
        # assignment (a model that stops learning is left where it is)
        target = await resume_offset(self.ctx.log, self.ctx.store, tp, rt, self.ctx.stats)
        if target is None:
            return
        if target < await self.ctx.log.position(tp):
            self.ctx.assignment.seek(tp, target)
        logger.warning(
            "model %r reloaded at version %d; replaying from %d", model, rt.version, target
        )

    async def _commit_offsets(self, skip_partitions: set[int]) -> None:
        """Start committing the Kafka offsets without waiting for the broker; a commit
        still running from the last checkpoint is awaited first, so commits never overlap
        and arrive in order. ``drain`` waits for the last one (shutdown, rebalance)."""
        assigned = self.ctx.log.assignment()
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
            await self.ctx.log.commit(offsets)
        except CommitFailed as exc:
            logger.info("Kafka offset commit skipped (%s); Redis stamps are authoritative", exc)

    def _worker_stats(self) -> dict[str, str]:
        """The worker's counters, as written to ``worker:{id}``."""
        fields = {**vars(self.ctx.stats), "pid": os.getpid(), "models": len(self.ctx.models)}
        mapping = {k: str(v) for k, v in fields.items()}
        mapping["updated_at"] = repr(time.time())
        return mapping


def _stale_incarnation(
    rt: ModelRuntime, old: ModelRuntime | None, marker: Stamp | None
) -> str | None:
    """Why the stored model ``rt`` cannot be reconciled with the log, or None: its spec's
    origin is older than a creation marker just read (``marker``, whose replay it does not
    reach) or than the incarnation this worker held (``old``), on the same partition. Only
    a store that lost a delete + re-create holds that (an origin is written once, after its
    marker, and a later creation's marker is always later in the log)."""
    newer = marker
    if newer is None and old is not None and old.incarnation != rt.incarnation:
        newer = old.origin
    if newer is None:
        return None
    origin, stamp = rt.origin, rt.stamp
    if origin is not None and (
        origin.partition != newer.partition or origin.offset >= newer.offset
    ):
        return None  # the stored incarnation is this one or a later one
    if stamp is not None and stamp.partition == newer.partition and stamp.offset >= newer.offset:
        return None  # its stamp is past the marker: replaying never meets it again
    return (
        f"model {rt.model!r}: the store holds an older incarnation of it (origin"
        f" {_at(origin)}) than the creation marker at {_at(newer)} the log holds (Redis"
        " restored from before a delete + re-create, or a create of the same id that lost"
        " a race); it stopped learning, its partition goes on. Delete and re-create it"
        " (POST /v1/models), or delete it"
    )


def _at(stamp: Stamp | None) -> str:
    return "none" if stamp is None else f"{stamp.partition}@{stamp.offset}"
