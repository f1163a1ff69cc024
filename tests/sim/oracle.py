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


def replay(spec: dict[str, Any], records: list[tuple[int, bytes]]) -> Expected:
    """``records``: (offset, value) of the model's home partition, in log order."""
    model, origin, incarnation = spec["id"], spec["origin"], spec.get("incarnation")
    learner = learners.build(spec["kind"], spec["dim"], **spec.get("params", {}))
    out, seen = Expected(), set()
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
    return out


def check(broker: MemoryBroker, store: MemoryStore, topic: str, deleted: list[str]) -> list[str]:
    problems = []
    for model in sorted(store.specs):
        spec = store.specs[model]
        tp = TopicPartition(topic, int(spec["origin"]["partition"]))
        records = [(r.offset, r.value or b"") for r in broker.records[tp]]
        exp = replay(spec, records)
        st = store.states.get(model)
        if st is None:
            if exp.applied or exp.rejected or exp.duplicate:
                problems.append(f"{model}: no state stored; expected {len(exp.applied)} applied")
            continue
        c = st.counters
        got = (c.applied, c.ids_sum, c.duplicate, c.rejected)
        want = (len(exp.applied), ids_sum(exp.applied), exp.duplicate, exp.rejected)
        if got != want:
            problems.append(
                f"{model} ({spec['incarnation']}): applied/ids_sum/duplicate/rejected"
                f" {got} != replay {want}"
            )
        elif st.state != exp.state:
            problems.append(f"{model} ({spec['incarnation']}): state bytes differ from the replay")
    for model in deleted:
        if model not in store.specs and model in store.states:
            problems.append(f"{model}: deleted, yet a state was written after the delete")
    return problems


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
        ever = replay({**spec, "origin": {"offset": -1}}, list(enumerate(values[start + 1 :])))
        tp = TopicPartition(topic, home)
        now = replay(spec, [(r.offset, r.value or b"") for r in broker.records[tp]])
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
