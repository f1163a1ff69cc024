"""Applying a frame to its model (``frame_apply.apply_frame``; docs/reliability.md,
"Frames").

A frame of n rows is handled as its n rows sent as JSON events in that order would be —
the same outcomes, counters, seen ids, statistics and learner state, bit for bit — with
one difference: the rows share the record's offset, so the stamp covers the frame as a
whole. It moves once, onto (partition, offset, last row's id), after every row is decided;
a checkpoint is only ever written between polled batches, so it never holds part of a
frame, and a replay after a crash skips a checkpointed frame whole or decides it again
whole.

The rows are learned with one ``learn_many`` call over the block. When anything in it
goes wrong (a row the learner refuses, a fault), the model is put back and the rows go
one by one, which finds and rejects the bad ones; the rest are applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from service.store.checkpoints import Stamp, id_hash
from service.store.seen import digests
from service.worker.frames import Frame
from service.worker.undo import Undo, check_finite

if TYPE_CHECKING:
    from service.worker.runtime import ModelRuntime


@dataclass(slots=True)
class FrameOutcome:
    applied: int = 0
    duplicate: int = 0
    skipped: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)  # (row, reason), in order
    counted: bool = True  # False: rejected without touching the model (a foreign partition)


def apply_frame(rt: ModelRuntime, frame: Frame, partition: int, offset: int) -> FrameOutcome:
    n = len(frame)
    if rt.skips(partition, offset):
        return FrameOutcome(skipped=n)
    foreign = rt.foreign(partition)
    if foreign is not None:  # changes nothing, the counters included (as for one event)
        return FrameOutcome(rejected=[(i, foreign) for i in range(n)], counted=False)
    keep = rt.seen_keep
    if (keep and n > keep) or frame.X.shape[1] != rt.learner.dim:
        out = _one_by_one(rt, frame, range(n))  # the window turns over / the learner's words
    else:
        out = _block(rt, frame)
    rt.stamp = Stamp(partition, offset, frame.id)
    rt.dirty = True
    return out


def _block(rt: ModelRuntime, frame: Frame) -> FrameOutcome:
    """Decide every row up front (bad, duplicate, to learn), learn the rest in one go."""
    ids = frame.ids
    n = len(ids)
    bad = frame.bad
    digest = digests(ids)
    live = np.flatnonzero(~np.isin(np.arange(n), list(bad))) if bad else np.arange(n)
    if rt.seen_keep:  # handle_many's decision: the window at each row's turn
        is_dup = rt.seen.duplicates(digest[live])
        todo: list[int] = live[~is_dup].tolist()
        dup: list[int] = live[is_dup].tolist()
    else:
        todo, dup = live.tolist(), []
    if todo:
        whole = len(todo) == n
        X = frame.X if whole else frame.X[todo]
        ys_all = frame.labels()
        hs_all = frame.hint_list()
        ys = ys_all if whole else [ys_all[i] for i in todo]
        hs = None if hs_all is None else (hs_all if whole else [hs_all[i] for i in todo])
        undo = Undo(rt.learner, rt.stats)
        try:
            if rt.stats.scale is not None:  # a refused row: found and refused one by one
                rt.stats.scale.admit_many(X, ys)
            reports = rt.learner.learn_many(X, ys, hints=hs)
            rt.stats.update_many(X, ys, reports)
            check_finite(undo, rt.learner, rt.stats)
        except Exception:  # a row the learner refuses, or a fault: find it row by row
            undo.restore(rt)
            return _one_by_one(rt, frame, range(n))
    # the counters and the seen window: the applied rows' ids in row order
    rt.counters.rejected += len(bad)
    rt.counters.duplicate += len(dup)
    if todo:
        rt._applied_many(digest[todo])
    return FrameOutcome(
        applied=len(todo), duplicate=len(dup), rejected=[(i, bad[i]) for i in sorted(bad)]
    )


def _one_by_one(rt: ModelRuntime, frame: Frame, rows: range) -> FrameOutcome:
    """``ModelRuntime.handle``'s decision and fault boundary for each row, in order."""
    out = FrameOutcome()
    ys = frame.labels()
    hs = frame.hint_list()
    for i in rows:
        event_id = frame.ids[i]
        reason = frame.bad.get(i)
        if reason is not None:
            rt.counters.rejected += 1
            out.rejected.append((i, reason))
            continue
        digest = id_hash(event_id)
        if digest in rt.seen:
            rt.counters.duplicate += 1
            out.duplicate += 1
            continue
        x = frame.X[i]
        y = ys[i]
        hint = None if hs is None else hs[i]
        undo = Undo(rt.learner, rt.stats)
        refused = rt.guard(x, y)
        if refused is not None:
            rt._reject(refused)
            out.rejected.append((i, refused))
            continue
        try:
            report = rt.learner.learn(x, y, hint=hint)
        except ValueError as exc:
            undo.restore(rt)
            rt._reject(f"model {rt.model!r} rejected the event: {exc}")
            out.rejected.append((i, rt.last_reason))
            continue
        except Exception as exc:
            rt._fault(undo, "learning", exc)
            out.rejected.append((i, rt.last_reason))
            continue
        try:
            rt.stats.update(x, y, report.prediction, report.loss, report.diagnostics)
            check_finite(undo, rt.learner, rt.stats)
        except Exception as exc:
            rt._fault(undo, "scoring", exc)
            out.rejected.append((i, rt.last_reason))
            continue
        rt._applied(event_id, digest)
        out.applied += 1
    return out
