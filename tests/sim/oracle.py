"""The oracle: per model incarnation, a clean replay of the final log, written apart from
the worker code (like ``tests/service/conftest.py::replay``) - and the checks against the
store. A rollback event changes nothing in the replay: restoring version N (the state at
N's stamp) and re-learning every event after the stamp once ends where learning them once
does. An event before the model's ``created`` marker, off its home partition (a worker
forwards it home, where its copy is the model's like any event there), or naming another
incarnation (produced for a deleted one, still in flight at the re-creation) is not its.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import learners
from learners.codec import encode_state
from service.store.checkpoints import ids_sum
from service.worker.adapters.memory_log import MemoryBroker
from service.worker.adapters.memory_store import MemoryStore
from service.worker.ports import TopicPartition
from tests._frames import record_events


@dataclass
class Expected:
    applied: list[str] = field(default_factory=list)
    duplicate: int = 0
    rejected: int = 0
    state: bytes = b""
    ever: set[str] = field(default_factory=set)  # valid ids ever produced after the origin
    seen: set[str] = field(default_factory=set)  # the ids applied (a re-send is a duplicate)
    learner: Any = None  # where the replay ended, to go on from (undoing rollbacks)


def _example_ok(ev: dict[str, Any]) -> bool:
    """The decoder's checks that the sim's invalid events exercise (no ``x``, a value
    over the bound)."""
    x = ev.get("x")
    return (
        isinstance(x, list)
        and bool(x)
        and all(
            isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            and abs(v) <= 1e150
            for v in x
        )
    )


events_of = record_events  # a frame's rows, or the one JSON event


def replay(
    spec: dict[str, Any], records: list[tuple[int, bytes]], start: Expected | None = None
) -> Expected:
    """``records``: (offset, value) of the model's home partition, in log order; from
    ``start`` (its learner, counters and seen ids, taken over) when given."""
    model, origin, incarnation = spec["id"], spec["origin"], spec.get("incarnation")
    if start is None:
        learner = learners.build(spec["kind"], spec["dim"], **spec.get("params", {}))
        out = Expected()
    else:
        learner, out = start.learner, start
    seen = out.seen
    for offset, value in records:
        for ev in events_of(value):
            if ev.get("model") != model or offset <= origin["offset"] or "type" in ev:
                continue  # another model's, before the origin, or a marker / rollback
            if ev.get("incarnation") not in (None, incarnation):
                continue  # a deleted incarnation's, in flight across the re-creation
            if not _example_ok(ev):
                out.rejected += 1
                continue
            if ev["id"] in seen:
                out.duplicate += 1
                continue
            try:
                learner.learn(ev["x"], ev["y"], hint=ev.get("hint"))
            except ValueError:
                out.rejected += 1
                continue
            seen.add(ev["id"])
            out.applied.append(ev["id"])
    out.state = encode_state(learner.state())
    out.learner = learner
    return out


@dataclass
class Undoing:
    """A model's rollback with ``discard_after`` or ``skip_ids`` (issue 32): its event id and
    offset, the offset of the version's stamp it names, and its options."""

    id: str
    offset: int
    after: int
    discard: bool
    skip: list[str]


def undoing(spec: dict[str, Any], records: list[tuple[int, bytes]]) -> Undoing | None:
    """The model's undoing rollback after its origin (the stream sends at most one, its
    incarnation's last rollback), or None."""
    for offset, value in records:
        if offset <= spec["origin"]["offset"] or value[:1] != b"{":
            continue
        ev = events_of(value)[0]
        if (
            ev.get("model") == spec["id"]
            and ev.get("type") == "rollback"
            and (ev.get("discard_after") or ev.get("skip_ids"))
        ):
            return Undoing(
                ev["id"],
                offset,
                int(ev["stamp"]["offset"]),
                bool(ev.get("discard_after")),
                list(ev.get("skip_ids", [])),
            )
    return None


def replay_undone(spec: dict[str, Any], records: list[tuple[int, bytes]], u: Undoing) -> Expected:
    """The model when the worker applied ``u`` (it may refuse it: a version no longer kept,
    or renumbered after a loss; then ``replay`` holds): the state and counters at the
    version's stamp, then with ``discard`` the events after the rollback, every id learned
    before it still seen; else the events after the stamp again with the skipped ids
    seen."""
    out = replay(spec, [r for r in records if r[0] <= u.after])
    if u.discard:
        out.seen = set(replay(spec, [r for r in records if r[0] < u.offset]).applied)
        return replay(spec, [r for r in records if r[0] > u.offset], out)
    out.seen |= set(u.skip)
    return replay(spec, [r for r in records if r[0] > u.after], out)


def expectations(
    spec: dict[str, Any], records: list[tuple[int, bytes]], listed: set[str] | None = None
) -> list[tuple[Undoing | None, Expected]]:
    """What the model must end as: the plain replay, or with an undoing rollback the
    worker applied the replay of it. Whether it applied or refused it depends on the store
    at that time (a version no longer kept, renumbered after a loss): the store's rollback
    listing (``listed``: the event ids) says which; None: either."""
    plain = replay(spec, records)
    u = undoing(spec, records)
    if u is None or (listed is not None and u.id not in listed):
        return [(None, plain)]
    undone = replay_undone(spec, records, u)
    return [(u, undone)] if listed is not None else [(u, undone), (None, plain)]


def check(broker: MemoryBroker, store: MemoryStore, topic: str, deleted: list[str]) -> list[str]:
    problems = []
    for model in sorted(store.specs):
        spec = store.specs[model]
        tp = TopicPartition(topic, int(spec["origin"]["partition"]))
        records = [(r.offset, r.value or b"") for r in broker.records[tp]]
        cands = expectations(spec, records, set(store.rollbacks_of.get(model, {})))
        st = store.states.get(model)
        if st is None:
            exp = cands[-1][1]
            if exp.applied or exp.rejected or exp.duplicate:
                problems.append(f"{model}: no state stored; expected {len(exp.applied)} applied")
            continue
        c = st.counters
        got = (c.applied, c.ids_sum, c.duplicate, c.rejected)
        found: list[str] = []
        for u, exp in cands:
            want = (len(exp.applied), ids_sum(exp.applied), exp.duplicate, exp.rejected)
            if got != want:
                found.append(f"applied/ids_sum/duplicate/rejected {got} != replay {want}")
            elif st.state != exp.state:
                found.append("state bytes differ from the replay")
            else:
                found = _listed(store, model, records, spec, u) if u is not None else []
                break
        for problem in found[:1]:
            where = " (undoing rollback applied)" if cands[0][0] is not None else ""
            problems.append(f"{model} ({spec['incarnation']}){where}: {problem}")
    for model in deleted:
        if model not in store.specs and model in store.states:
            problems.append(f"{model}: deleted, yet a state was written after the delete")
    return problems


def _listed(
    store: MemoryStore,
    model: str,
    records: list[tuple[int, bytes]],
    spec: dict[str, Any],
    u: Undoing,
) -> list[str]:
    """The store lists an applied undoing rollback with the count it discarded."""
    rec = store.rollbacks_of[model][u.id]
    if u.discard:
        before = len(replay(spec, [r for r in records if r[0] <= u.after]).applied)
        learned = len(replay(spec, [r for r in records if r[0] < u.offset]).applied)
        if rec.discarded != learned - before:
            return [f"rollback {u.id} lists {rec.discarded} discarded, not {learned - before}"]
    return []


def check_truncated(
    store: MemoryStore, history: list[tuple[int, bytes]], broker: MemoryBroker, topic: str
) -> list[str]:
    """With the log losing tails (``--truncation``) no replay is exact: the bounds are that
    no model applies more ids than were ever produced for it after its marker (else some
    id was applied twice) nor fewer than the final log holds (else some were lost), unless
    the model stopped learning and says so (``halted``: docs/reliability.md)."""
    problems = []
    for model in sorted(store.specs):
        spec = store.specs[model]
        home, marker = int(spec["origin"]["partition"]), spec["origin"]["event_id"]
        values = [v for p, v in history if p == home]
        start = next(i for i, v in enumerate(values) if events_of(v)[0].get("id") == marker)
        # its records produced on another partition are forwarded home, whenever produced
        foreign = [v for p, v in history if p != home]
        ever = replay(
            {**spec, "origin": {"offset": -1}}, list(enumerate(values[start + 1 :] + foreign))
        )
        tp = TopicPartition(topic, home)
        held = [(r.offset, r.value or b"") for r in broker.records[tp]]
        now = min((e for _, e in expectations(spec, held)), key=lambda e: len(e.applied))
        st = store.states.get(model)
        applied = st.counters.applied if st is not None else 0
        if applied > len(ever.applied):
            problems.append(
                f"{model}: applied {applied} > {len(ever.applied)} distinct ids produced"
            )
        if applied < len(now.applied) and model not in store.halted:  # a halted one says so
            problems.append(
                f"{model}: applied {applied} < {len(now.applied)} distinct ids in the log"
            )
    return problems
