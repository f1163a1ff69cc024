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

from aiokafka.structs import ConsumerRecord, TopicPartition

from service.store.checkpoints import (
    HistoryEntry,
    Stamp,
    StoredState,
    read_history_entry,
    read_seen_upto,
)
from service.worker.context import WorkerContext
from service.worker.events import Event
from service.worker.models import ModelRuntime
from service.worker.rebalance import stamp_is_void
from service.worker.retry import with_redis

logger = logging.getLogger(__name__)


async def handle_rollback(
    ctx: WorkerContext, tp: TopicPartition, rec: ConsumerRecord, ev: Event, rt: ModelRuntime
) -> None:
    """Apply, skip or refuse (dead-letter) one rollback event of ``rt``'s model."""
    st = ctx.stats
    here = Stamp(tp.partition, rec.offset, ev.id)
    if rt.covers(tp.partition, rec.offset):
        st.skipped += 1
        return
    b = rt.barrier
    if b is not None and b.partition == tp.partition and rec.offset <= b.offset:
        # re-delivered after a seek-back (ours or an earlier one): already decided
        rt.stamp, rt.dirty = here, True
        st.skipped += 1
        return
    assert ev.version is not None
    version = ev.version
    entry = await with_redis(
        ctx, lambda: read_history_entry(ctx.redis, ctx.keys, rt.model, version), "history"
    )
    reason = await _refusal(ctx, tp, rec, rt, version, entry)
    restored = None
    if reason is None:
        assert entry is not None and entry.counters is not None
        applied = entry.counters.applied
        seen = await with_redis(
            ctx, lambda: read_seen_upto(ctx.redis, ctx.keys, rt.model, applied), "seen ids"
        )
        stored = StoredState(
            rt.model, entry.state, rt.version, entry.stamp, entry.counters, entry.stats
        )
        try:
            restored = ModelRuntime.create(
                rt.spec, stored, seen, seen_keep=ctx.settings.seen_ids_keep
            )
        except (ValueError, TypeError, KeyError) as exc:
            reason = f"model {rt.model!r}: checkpoint version {version} cannot be loaded: {exc}"
    if restored is None or entry is None:
        # refused: decided once (barrier), stamped, counters untouched
        rt.stamp, rt.barrier, rt.dirty = here, here, True
        st.rejected += 1
        await ctx.deadletters.send(rec, reason or "rollback refused")
        return
    restored.barrier = here
    restored.rewind = True  # the next write moves the stamp backwards on purpose
    restored.unsee_above = entry.counters.applied if entry.counters else None
    restored.dirty = True
    ctx.models[rt.model] = restored
    target = entry.stamp.offset + 1
    ctx.consumer.seek(tp, target)
    ctx.next_offset[tp] = target  # process_batch drops the rest of this partition's batch
    ctx.generation += 1
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
    ctx: WorkerContext,
    tp: TopicPartition,
    rec: ConsumerRecord,
    rt: ModelRuntime,
    version: int,
    entry: HistoryEntry | None,
) -> str | None:
    """Why version ``version`` cannot be restored here, or None when it can."""
    head = f"model {rt.model!r}: cannot roll back to version {version}"
    if entry is None:
        keep = ctx.settings.history_keep
        return f"{head}: it is not among the last {keep} checkpoints kept"
    if entry.counters is None:
        return f"{head}: the checkpoint predates rollback support (no counters kept)"
    s = entry.stamp
    if s.partition != tp.partition:
        return f"{head}: its stamp is on partition {s.partition}, the model is on {tp.partition}"
    if s.offset >= rec.offset:
        return f"{head}: its stamp (offset {s.offset}) is not before the rollback event"
    begin = (await ctx.consumer.beginning_offsets([tp]))[tp]
    if s.offset + 1 < begin:
        return f"{head}: the events after its stamp are no longer in the log (starts at {begin})"
    if await stamp_is_void(ctx, tp, s):
        return f"{head}: its stamp belongs to an earlier log (the log was reset)"
    return None
