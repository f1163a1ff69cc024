"""The ``rollback`` control event (docs/events.md §4, docs/checkpoints.md).

The owning worker applies it in log order: it installs history version N (state, running
metrics, counters and the seen ids of that version) with N's stamp, and seeks the partition
back to the stamp's offset + 1, so the model re-learns every event after the stamp exactly
once. Other models on the partition skip the re-delivered records by their own stamps. The
model's ``barrier`` (the rollback event's own position) makes the re-delivered rollback
event, and any earlier one, a no-op, also after a crash or a restart.

Rollback events never touch the per-model counters (applied/duplicate/rejected, ids_sum):
those always describe the examples the state has learned.

Two options undo instead of re-learning (issue 32; docs/checkpoints.md, "Undoing events"):

- ``discard_after``: version N is installed with the rollback event's own stamp, so the
  events between N's stamp and the rollback are never learned again (no seek-back). The
  ids it had applied there stay in the dedupe window, so a re-send of one is a duplicate;
  the rollback is listed (``model:{id}:rollbacks``, by the checkpoint write that holds
  it) with the offsets and the count discarded.
- ``skip_ids``: the named ids enter N's dedupe window before the re-learn, so they are
  dropped as duplicates there and whenever re-sent.

Both are decided here, in log order, from the state before the rollback event: a replay
after a crash decides them again identically (the listing is keyed by the event id).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from service.store.checkpoints import HistoryEntry, RollbackRecord, Stamp, StoredState
from service.store.seen import digests
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
        reason = await self._refusal(tp, rec, rt, version, entry, ev.stamp, len(ev.skip_ids))
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
        assert entry.counters is not None
        applied = entry.counters.applied
        restored.barrier = here
        restored.unsee_above = applied
        restored.dirty = True
        undone = _undone(rt, applied) if ev.discard_after else np.zeros(0, np.uint64)
        kept = np.concatenate([undone, digests(list(ev.skip_ids))]) if ev.skip_ids else undone
        if len(kept) and restored.seen_keep:  # never learned from here on: a re-send is a duplicate
            restored.seen.add(kept, np.full(len(kept), applied, np.int64), time.time())
        if ev.discard_after or ev.skip_ids:
            record = RollbackRecord(
                ev.id,
                version,
                tp.partition,
                rec.offset,
                ev.discard_after,
                entry.stamp.offset,
                rt.counters.applied - applied if ev.discard_after else 0,
                ev.skip_ids,
                ev.ts or 0.0,
            )
            restored.listing = record  # listed by the checkpoint that holds it
        self.ctx.models[rt.model] = restored
        if ev.discard_after:
            # N's state from here on: the events up to this one are passed over
            restored.stamp = here
            logger.warning(
                "model %r rolled back to version %d (event %r at %s[%d]@%d), discarding"
                " the events after offset %d (%d applied ones undone)",
                rt.model,
                version,
                ev.id,
                tp.topic,
                tp.partition,
                rec.offset,
                entry.stamp.offset,
                rt.counters.applied - applied,
            )
            return
        restored.rewind = True  # the next write moves the stamp backwards on purpose
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
        named: tuple[int, int, str] | None = None,
        skip: int = 0,
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
        for done in await self.ctx.store.rollbacks(rt.model):
            # an earlier discard (in log order: a replay decides the same) whose range
            # holds this stamp: the version learned events the log says never to learn,
            # and the ids applied since reuse its applied counts (its window is not N's)
            if (
                done.discard_after
                and done.partition == s.partition
                and done.offset < rec.offset
                and done.after < s.offset < done.offset
            ):
                return (
                    f"{head}: it holds events that rollback {done.event_id!r} discarded"
                    f" (offsets {done.after + 1}..{done.offset - 1}); choose a version"
                    f" written after it, or one at or before offset {done.after}"
                )
        keep = self.ctx.settings.seen_ids_keep
        if skip and rt.counters.applied - entry.counters.applied + skip > keep:
            # the skipped ids are dropped through the dedupe window: one pushed out of it
            # by the events re-learned before it would be learned
            return (
                f"{head} skipping {skip} ids: {rt.counters.applied - entry.counters.applied}"
                f" events were learned after it, more than the dedupe window"
                f" (ONLINEPREDICT_SEEN_IDS_KEEP = {keep}) holds with the skipped ids; choose"
                " a later version"
            )
        if named is not None and named != (s.partition, s.offset, s.event_id):
            return (
                f"{head}: that version is now another checkpoint (stamp {s.partition}@{s.offset},"
                f" the rollback named {named[0]}@{named[1]}): the store lost writes and issued"
                " the number again; list the checkpoints and roll back again"
            )
        return None


def _undone(rt: ModelRuntime, applied: int) -> np.ndarray:
    """Digests of the ids ``rt`` applied after the ``applied`` count, still in its window."""
    recs = rt.seen.records()
    return np.asarray(recs.digests[recs.applied > applied], dtype=np.uint64)
