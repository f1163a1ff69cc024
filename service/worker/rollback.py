"""The ``rollback`` control event (docs/events.md §4, docs/checkpoints.md).

The owning worker applies it in log order: it installs history version N (state, running
metrics, counters and the seen ids of that version) with N's stamp, and seeks the partition
back to the stamp's offset + 1, so the model re-learns every event after the stamp exactly
once. Other models on the partition skip the re-delivered records by their own stamps. The
model's ``barrier`` (the rollback event's own position) makes the re-delivered rollback
event, and any earlier one, a no-op, also after a crash or a restart.

Rollback events never touch the per-model counters (applied/duplicate/rejected, ids_sum):
those always describe the examples the state has learned.
"""

from __future__ import annotations

import logging

from service.store.checkpoints import HistoryEntry, Stamp, StoredState
from service.worker.context import WorkerContext
from service.worker.divergence import stamp_is_void
from service.worker.events import Event
from service.worker.ports import Record, TopicPartition
from service.worker.runtime import ModelRuntime

logger = logging.getLogger(__name__)


class Rollback:
    def __init__(self, ctx: WorkerContext) -> None:
        self.ctx = ctx

    async def handle(self, tp: TopicPartition, rec: Record, ev: Event, rt: ModelRuntime) -> None:
        """Apply, skip or refuse (dead-letter) one rollback event of ``rt``'s model."""
        st = self.ctx.stats
        here = Stamp(tp.partition, rec.offset, ev.id)
        if rt.covers(tp.partition, rec.offset):
            st.skipped += 1
            return
        b = rt.barrier
        if b is not None and b.partition == tp.partition and rec.offset <= b.offset:
            # re-delivered after a seek-back (ours or an earlier one): already decided
            rt.pass_over(here)
            st.skipped += 1
            return
        assert ev.version is not None
        version = ev.version
        entry = await self.ctx.store.history_entry(rt.model, version)
        reason = await self._refusal(tp, rec, rt, version, entry)
        restored = None
        if reason is None:
            assert entry is not None and entry.counters is not None
            seen = await self.ctx.store.seen_upto(rt.model, entry.counters.applied)
            stored = StoredState(
                rt.model,
                entry.state,
                rt.version,
                entry.stamp,
                entry.counters,
                entry.stats,
                token=rt.token,
            )
            try:
                restored = ModelRuntime.create(
                    rt.spec, stored, seen, seen_keep=self.ctx.settings.seen_ids_keep
                )
            except (ValueError, TypeError, KeyError) as exc:
                reason = f"model {rt.model!r}: checkpoint version {version} cannot be loaded: {exc}"
        if restored is None or entry is None:
            # refused: decided once (barrier), stamped, counters untouched
            rt.pass_over(here, barrier=True)
            st.rejected += 1
            await self.ctx.deadletters.send(rec, reason or "rollback refused")
            return
        restored.barrier = here
        restored.rewind = True  # the next write moves the stamp backwards on purpose
        restored.unsee_above = entry.counters.applied if entry.counters else None
        restored.dirty = True
        self.ctx.models[rt.model] = restored
        target = entry.stamp.offset + 1
        # process_batch drops the rest of this partition's batch
        self.ctx.assignment.seek(tp, target)
        logger.warning(
            "model %r rolled back to version %d (event %r at %s[%d]@%d); re-learning from %d",
            rt.model,
            version,
            ev.id,
            tp.topic,
            tp.partition,
            rec.offset,
            target,
        )

    async def _refusal(
        self,
        tp: TopicPartition,
        rec: Record,
        rt: ModelRuntime,
        version: int,
        entry: HistoryEntry | None,
    ) -> str | None:
        """Why version ``version`` cannot be restored here, or None when it can."""
        head = f"model {rt.model!r}: cannot roll back to version {version}"
        if entry is None:
            kept = self.ctx.settings.history_keep
            return f"{head}: it is not among the last {kept} checkpoints kept"
        if entry.counters is None:
            return f"{head}: the checkpoint predates rollback support (no counters kept)"
        s = entry.stamp
        if s.partition != tp.partition:
            return (
                f"{head}: its stamp is on partition {s.partition}, the model is on {tp.partition}"
            )
        if s.offset >= rec.offset:
            return f"{head}: its stamp (offset {s.offset}) is not before the rollback event"
        begin = await self.ctx.log.beginning_offset(tp)
        if s.offset + 1 < begin:
            return (
                f"{head}: the events after its stamp are no longer in the log (starts at {begin})"
            )
        if await stamp_is_void(self.ctx.log, tp, s):
            return f"{head}: its stamp belongs to an earlier log (the log was reset)"
        return None
