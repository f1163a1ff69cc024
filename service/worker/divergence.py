"""Where to resume a model whose stamp is void: the log diverged from what it learned.

A stamp is void when the record at its offset now carries another event id or the log ends
before it (a truncated tail with new records written at the old offsets: replication factor
1, an unclean leader election, the memory-only broker restarted). The model's state includes
every event up to the void stamp, some of which the log no longer holds. The events it still
holds at their old offsets must not be learned again, the new ones must be learned once
(docs/reliability.md, "Ordinary operations").

The known points of the old log are the model's origin and its kept checkpoints' stamps
(``history``, each with the ``applied`` count of its version). The newest one the log still
holds at its offset, P, is before the divergence; the records between P and the divergence
are old events applied after P. When every id applied after P is still in the model's
dedupe window (``applied(P) >= applied - len(window)``), resuming after P is exact: those
records are dropped as duplicates and everything after the divergence is learned. Otherwise
the service cannot tell old from new there, so the model stops learning and says so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.store.checkpoints import Stamp
from service.worker.events import raw_event_id
from service.worker.ports import ModelStore, Probe, Reader, Record, TopicPartition
from service.worker.runtime import ModelRuntime
from service.worker.telemetry import WorkerStats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """``stamp``: the new stamp (None: from the log's start); ``halted``: why the model
    cannot resume safely (then ``stamp`` is unused)."""

    stamp: Stamp | None
    halted: str | None = None


async def holds(log: Reader, tp: TopicPartition, stamp: Stamp) -> bool | None:
    """Whether the log holds the stamp's event at the stamp's offset; None when the
    record cannot be read (compacted away, or the broker did not answer)."""
    return matches(await log.read_at(tp, stamp.offset), stamp)


def matches(rec: Record | Probe, stamp: Stamp) -> bool | None:
    """``holds`` for a record already read at the stamp's offset."""
    if rec is Probe.PAST_END:
        return False
    if rec is Probe.UNREADABLE or isinstance(rec, Probe) or rec.offset != stamp.offset:
        return None
    return raw_event_id(rec.value) == stamp.event_id


async def stamp_is_void(log: Reader, tp: TopicPartition, stamp: Stamp) -> bool:
    """True when the log no longer holds the stamp's event at the stamp's offset. A record
    that cannot be read (no answer; compacted away) contradicts nothing: the stamp stays."""
    held = await holds(log, tp, stamp)
    if held is None:
        logger.warning(
            "could not read %s[%d]@%d; keeping the stamp", tp.topic, tp.partition, stamp.offset
        )
    return held is False


async def resume_offset(
    log: Reader, store: ModelStore, tp: TopicPartition, rt: ModelRuntime, stats: WorkerStats
) -> int | None:
    """The offset ``rt`` (just loaded) reads ``tp`` from: after its stamp, the log's start
    without one, or, when the stamp is void, after the point :func:`find_resume` finds (the
    model then moves its stamp back on its next write). None when it stops learning (noted
    in the store; the model must not pin the partition's position)."""
    begin = await log.beginning_offset(tp)
    s = rt.stamp
    if s is None:
        return begin
    if s.offset < begin or not await stamp_is_void(log, tp, s):
        return s.offset + 1
    stats.voided_stamps += 1
    resume = await find_resume(log, store, tp, rt)
    if resume.halted is not None:
        logger.error("%s", resume.halted)
        rt.halted = resume.halted
        await store.note_halted(rt.model, resume.halted)
        return None
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
    return begin if resume.stamp is None else resume.stamp.offset + 1


async def find_resume(
    log: Reader, store: ModelStore, tp: TopicPartition, rt: ModelRuntime
) -> Resume:
    """The newest known point still in the log whose later ids the window covers."""
    floor = rt.counters.applied - len(rt.seen)  # ids applied after this count are in the window
    points: list[tuple[int, Stamp]] = []  # (applied count at the point, its stamp), newest first
    for entry in await store.history(rt.model):
        if entry.counters is not None and entry.stamp.partition == tp.partition:
            points.append((entry.counters.applied, entry.stamp))
    if rt.origin is not None and rt.origin.partition == tp.partition:
        points.append((0, rt.origin))
    begin = await log.beginning_offset(tp)
    for applied, stamp in points:
        if stamp.offset < begin or stamp == rt.stamp:
            continue
        held = await holds(log, tp, stamp)
        if not held:
            continue
        if applied >= floor:
            return Resume(stamp)
        return Resume(None, _halt(rt, stamp, applied, floor))
    if rt.origin is None and floor <= 0:  # every id it ever applied is in the window
        return Resume(None)
    return Resume(
        None,
        f"model {rt.model!r}: the log diverged from what it learned (its stamp {_at(rt.stamp)}"
        " is void) and no kept checkpoint stamp is still in the log; it stopped learning."
        " Re-create it, or roll it back to a version whose events the log holds",
    )


class EndMemo:
    """A ``Reader`` for one restore: an offset found past the end makes every later one of
    that partition past the end too, so a partition whose log restarted empty costs one
    probe read, not one per model (a restart with a hundred void stamps was a storm)."""

    def __init__(self, log: Reader) -> None:
        self.log = log
        self.begin: dict[TopicPartition, int] = {}
        self.end: dict[TopicPartition, int] = {}  # lowest offset found past the end

    async def beginning_offset(self, tp: TopicPartition) -> int:
        if tp not in self.begin:
            self.begin[tp] = await self.log.beginning_offset(tp)
        return self.begin[tp]

    async def read_at(self, tp: TopicPartition, offset: int) -> Record | Probe:
        end = self.end.get(tp)
        if end is not None and offset >= end:
            return Probe.PAST_END
        rec = await self.log.read_at(tp, offset)
        if rec is Probe.PAST_END and offset >= await self.beginning_offset(tp):
            self.end[tp] = offset if end is None else min(end, offset)
        return rec


def _halt(rt: ModelRuntime, stamp: Stamp, applied: int, floor: int) -> str:
    return (
        f"model {rt.model!r}: the log diverged from what it learned (its stamp {_at(rt.stamp)}"
        f" is void); the newest kept stamp still in the log ({_at(stamp)}) is {floor - applied}"
        " events older than the dedupe window reaches, so old and new events there cannot be"
        " told apart; it stopped learning. Re-create it, or roll it back to a version whose"
        " events the log holds"
    )


def _at(stamp: Stamp | None) -> str:
    return "none" if stamp is None else f"{stamp.partition}@{stamp.offset}"
