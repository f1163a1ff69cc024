"""The producers and the API: the event stream and the model operations of one seed.

Models are created as ``POST /v1/models`` does (a ``created`` marker to the key's partition,
then the spec with that origin, ``service.store.registry.with_origin``) and deleted as
``DELETE`` does (``MemoryStore.delete``). Events: examples with fresh ids, re-sent ids (a
producer's retry: same body), invalid ones (wrong dimension, no ``x``), examples sent to a
non-home partition, events of unknown or deleted models, rollbacks to a version the store
keeps (the API checks it exists). Its own ``random.Random``: the stream does not depend on
the fault schedule, except for the versions a rollback names (read from the store).

Issue 32: half the bodies carry the model's ``incarnation`` as the API and the SDK send it
(the others are an external producer's, without); after a re-creation, records of the
deleted incarnation still in flight reach the log behind the new marker (events, a label,
frames), which no incarnation may learn; and some models are *misrouted*: an external
producer whose partitioner hashes keys otherwise sends all their examples to another
partition, from where the worker owning it forwards them home. These draws come from a
second ``random.Random``, so the first one's draws stay those of the stream before.
Records off their home partition name their incarnation (a forward may land behind a new
marker before its spec is stored, where one without would be the new model's or nobody's
by timing), and go there only with a window wider than the run, as re-sent ids do: a
forward repeated after a crash is a re-send, dropped while the first copy's id is in the
window (docs/reliability.md, "Partitions").
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from clients.wire import encode_frame
from service.store.registry import created_marker, with_origin
from service.worker.adapters.memory_log import MemoryBroker, MemoryRecord
from service.worker.adapters.memory_store import MemoryStore
from service.worker.ports import TopicPartition
from tests._frames import record_events

TOPIC = "events"
# off-home records with any window (tests/sim/test_forwarding.py): a crash between a forward
# and its commit then shows as an id learned twice once the window turned over (a limit)
FORWARD_ANY_WINDOW = False
KINDS = ("pa", "pa-classifier")


@dataclass
class ModelPlan:
    id: str
    kind: str
    dim: int
    live: bool = False  # its spec is stored
    pending: int = 0  # actions until the spec of a produced marker is stored
    incarnation: str = ""
    rollbacks: int = 0  # of this incarnation
    origin: tuple[int, int] = (0, 0)  # the marker's partition and offset
    recent: list[bytes] = field(default_factory=list)  # last valid bodies, for re-sends
    previous: str = ""  # the incarnation deleted before this one: its records in flight
    misrouted: int | None = None  # the partition an external producer sends examples to
    undone: bool = False  # an undoing rollback (discard_after / skip_ids) was sent


def _body(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Stream:
    def __init__(
        self,
        seed: int,
        broker: MemoryBroker,
        store: MemoryStore,
        partitions: int,
        frames: bool = False,
    ) -> None:
        self.rng = random.Random(f"stream:{seed}")
        self.rng2 = random.Random(f"stream2:{seed}")  # issue 32's draws (module docstring)
        self.rng3 = random.Random(f"stream3:{seed}")  # undoing rollbacks' draws (issue 32)
        # with ``frames``, a third of the examples (and of the invalid ones) travel as binary
        # frames of 1-4 rows (docs/events.md §6), re-sent like any body
        self.frames = frames
        self.broker = broker
        self.store = store
        self.partitions = partitions
        n = self.rng.randint(2, 4)
        self.models = [
            ModelPlan(f"m{i}", self.rng.choice(KINDS), self.rng.randint(2, 4)) for i in range(n)
        ]
        self.counter = 0
        # Re-sent ids only with a window wider than the run: after a rollback the dedupe
        # window is what the store still keeps of the version's ids, fewer than
        # ``seen_ids_keep`` when more were applied since (a documented limit,
        # docs/checkpoints.md "Limits"); the stamps are what small windows exercise.
        self.resend = True
        self.history: list[tuple[int, bytes]] = []  # (partition, value) of every record
        self.on_spec_change: Callable[[], None] = lambda: None
        self.produced = 0
        if partitions > 1:  # an external producer's partitioner puts some models elsewhere
            for m in self.models:
                if self.rng2.random() < 0.3:
                    m.misrouted = (
                        self.home(m.id) + self.rng2.randint(1, partitions - 1)
                    ) % partitions

    def home(self, model: str) -> int:
        return zlib.crc32(model.encode()) % self.partitions  # the broker's key partitioner

    def _append(self, model: str, body: bytes, partition: int | None = None) -> MemoryRecord:
        self.produced += 1
        rec = self.broker.append(TOPIC, body, model.encode(), partition)
        self.history.append((rec.partition, body))  # survives a truncation of the log
        return rec

    def _next_id(self, model: str) -> str:
        self.counter += 1
        return f"{model}-e{self.counter}"

    # --- the API ---------------------------------------------------------------------------
    def create(self, m: ModelPlan, *, at_once: bool) -> None:
        self.counter += 1
        m.previous, m.incarnation = m.incarnation, f"inc{self.counter}"
        marker = created_marker(m.id, m.incarnation)
        rec = self._append(m.id, _body(marker))
        m.origin = (rec.partition, rec.offset)
        m.pending = 0 if at_once else self.rng.randint(1, 3)
        m.recent, m.rollbacks = [], 0
        m.undone = False
        if at_once:
            self._store_spec(m)

    def _store_spec(self, m: ModelPlan) -> None:
        spec = {"id": m.id, "kind": m.kind, "dim": m.dim, "params": {}, "assets": None}
        self.store.create(with_origin(spec, m.incarnation, *m.origin), topic=TOPIC)
        m.live = True
        self.on_spec_change()

    def delete(self, m: ModelPlan) -> None:
        self.store.delete(m.id)
        m.live = False
        self.on_spec_change()

    def tail(self) -> None:
        """One more example per live model: the stream goes on after the faults."""
        for m in self.models:
            if m.live:
                self._append(m.id, self._example(m))

    def finish_pending(self) -> None:
        """The API calls in flight complete (the drain)."""
        for m in self.models:
            if m.pending:
                m.pending = 0
                self._store_spec(m)

    # --- one action: a small burst -----------------------------------------------------------
    def act(self) -> None:
        for m in self.models:
            if m.pending:
                m.pending -= 1
                if not m.pending:
                    self._store_spec(m)
        for _ in range(self.rng.randint(1, 4)):
            self._one()

    def _one(self) -> None:
        rng = self.rng
        live = [m for m in self.models if m.live]
        dead = [m for m in self.models if not m.live and not m.pending]
        roll = rng.random()
        if not live or roll < 0.004:
            if dead:
                self.create(rng.choice(dead), at_once=rng.random() < 0.5)
            return
        m = rng.choice(live)
        if roll < 0.010:
            self.delete(m)
        elif roll < 0.030:
            self._rollback(m)
        elif roll < 0.080 and m.recent and self.resend:
            self._append(m.id, rng.choice(m.recent[-5:]))  # a producer's retry
        elif roll < 0.100:
            self._invalid(m)
        elif roll < 0.115 and self.partitions > 1:
            other = (self.home(m.id) + rng.randint(1, self.partitions - 1)) % self.partitions
            self._append(m.id, self._example(m, True), other if self._forwards() else None)
        elif roll < 0.125:
            ghost = rng.choice(dead).id if dead and rng.random() < 0.7 else "ghost"
            self._append(
                ghost, _body({"model": ghost, "id": self._next_id(ghost), "x": [1.0], "y": 1})
            )
        else:
            off = m.misrouted if self._forwards() else None
            tagged = off is not None
            frame = self.frames and rng.random() < 0.35
            body = self._frame(m, tagged=tagged) if frame else self._example(m, tagged)
            m.recent = [*m.recent[-9:], body]
            self._append(m.id, body, off)
        if m.previous and self.rng2.random() < 0.05:
            self._stale(m)

    def _forwards(self) -> bool:
        """Whether records go off their home partition (the module docstring)."""
        return self.resend or FORWARD_ANY_WINDOW

    def _example(self, m: ModelPlan, tagged: bool = False) -> bytes:
        rng = self.rng
        x = [round(rng.uniform(-2, 2), 3) for _ in range(m.dim)]
        y: Any = rng.choice((-1, 1)) if m.kind == "pa-classifier" else round(rng.uniform(-3, 3), 3)
        body = {"model": m.id, "id": self._next_id(m.id), "x": x, "y": y}
        # the API's or the SDK's (else an external producer's); always off home (docstring)
        if tagged or self.rng2.random() < 0.5:
            body["incarnation"] = m.incarnation
        return _body(body)

    def _stale(self, m: ModelPlan) -> None:
        """A record the API produced for the deleted incarnation, reaching the log only
        now (behind the new marker): an event, a label or a frame; home or misrouted."""
        x, y = self._row(m)
        kind = self.rng2.random()
        event_id = self._next_id(m.id)
        if kind < 0.4 or not self.frames:
            extra = {"prediction_id": event_id} if kind < 0.2 else {}
            event_id = f"label:{event_id}" if kind < 0.2 else event_id
            body = _body(
                {"model": m.id, "id": event_id, "x": x, "y": y, "incarnation": m.previous, **extra}
            )
        else:
            body = encode_frame(m.id, [event_id], [x], [y], ts=0.0, incarnation=m.previous)
        off = m.misrouted if self._forwards() and self.rng2.random() < 0.5 else None
        self._append(m.id, body, off)

    def _row(self, m: ModelPlan) -> tuple[list[float], Any]:
        rng = self.rng
        x = [round(rng.uniform(-2, 2), 3) for _ in range(m.dim)]
        y: Any = rng.choice((-1, 1)) if m.kind == "pa-classifier" else round(rng.uniform(-3, 3), 3)
        return x, y

    def _frame(self, m: ModelPlan, bad: str = "", *, tagged: bool = False) -> bytes:
        """1-4 rows; sometimes an id twice (the second is a duplicate); ``bad``: one row over
        the value bound (the decoder refuses that row), or every row one column too wide
        (the learner refuses them all)."""
        rng = self.rng
        n = rng.randint(1, 4)
        ids = [self._next_id(m.id) for _ in range(n)]
        if n > 1 and rng.random() < 0.2:
            ids[-1] = ids[0]
        rows = [self._row(m) for _ in range(n)]
        X = [x for x, _ in rows]
        if bad == "value":
            X[rng.randrange(n)][0] = 1e200
        elif bad == "dim":
            X = [[*x, 0.5] for x in X]
        incarnation = m.incarnation if tagged or self.rng2.random() < 0.5 else None
        return encode_frame(m.id, ids, X, [y for _, y in rows], ts=0.0, incarnation=incarnation)

    def _invalid(self, m: ModelPlan) -> None:
        if self.frames and self.rng.random() < 0.35:
            self._append(m.id, self._frame(m, self.rng.choice(("value", "dim"))))
            return
        event_id = self._next_id(m.id)
        if self.rng.random() < 0.5:  # the learner refuses it
            body = {"model": m.id, "id": event_id, "x": [0.5] * (m.dim + 1), "y": 1}
        else:  # the decoder does
            body = {"model": m.id, "id": event_id, "y": 1}
        self._append(m.id, _body(body))

    def _rollback(self, m: ModelPlan) -> None:
        history = self.store.histories.get(m.id, [])
        kept = [e.version for e in history]
        if not kept or (self.resend and m.rollbacks):
            # with re-sent ids, one rollback per incarnation: rolling "forward" to a version
            # written before an earlier rollback does not restore the ids that rollback
            # unsaw (docs/checkpoints.md, "Limits"), so a re-send may be learned again
            return
        m.rollbacks += 1
        version = self.rng.choice(kept)
        if m.undone:  # drawn all the same: the rest of the stream stays as it was
            return
        body = {"model": m.id, "id": self._next_id(m.id), "type": "rollback", "version": version}
        self._append(m.id, _body(self._undoing(m, body, history)))

    def _undoing(self, m: ModelPlan, body: dict[str, Any], history: list[Any]) -> dict[str, Any]:
        """As the API sends it (issue 32): the version's stamp, and for some rollbacks
        ``discard_after`` or ``skip_ids`` (ids of the model's events after the stamp, or
        one not sent yet). An undoing rollback is its incarnation's last (the oracle's
        replay of it assumes no later rollback; docs/checkpoints.md, "Undoing events")."""
        rng = self.rng3
        entry = next(e for e in history if e.version == body["version"])
        s = entry.stamp
        body["stamp"] = {"partition": s.partition, "offset": s.offset, "event_id": s.event_id}
        roll = rng.random()
        if roll < 0.25:
            body["discard_after"] = True
        elif roll < 0.45:
            tp = TopicPartition(TOPIC, s.partition)
            ids = [
                ev["id"]
                for r in self.broker.records.get(tp, [])
                if r.offset > s.offset and r.value
                for ev in record_events(r.value)
                if ev.get("model") == m.id and "type" not in ev and isinstance(ev.get("id"), str)
            ]
            skip = rng.sample(ids, min(len(ids), rng.randint(1, 2)))
            # an id still to come: dropped when it arrives, while it is in the dedupe
            # window (with a window wider than the run: a documented limit otherwise)
            if rng.random() < 0.3 and self.resend:
                skip.append(f"{m.id}-e{self.counter + rng.randint(1, 20)}")
            if not skip:
                return body
            body["skip_ids"] = skip
        else:
            return body
        m.undone = True
        return body
