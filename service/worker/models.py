"""One model inside a worker: learner, running metrics, counters, stamp and seen ids.

:meth:`ModelRuntime.handle` is the per-event online protocol: skip what the stamp covers,
drop a duplicate id, else ``learn`` (predict, score, update) and update the running
metrics. Every handled event (applied, duplicate or rejected) moves the in-memory stamp,
so its counters are checkpointed exactly once too.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import learners
from learners.codec import decode_state, encode_state
from service.metrics.running import RunningStats
from service.store.checkpoints import (
    CheckpointWrite,
    Counters,
    Stamp,
    StoredState,
    id_hash,
)
from service.worker.events import Event

logger = logging.getLogger(__name__)

APPLIED, DUPLICATE, REJECTED, SKIPPED = "applied", "duplicate", "rejected", "skipped"
_MASK64 = (1 << 64) - 1


@dataclass
class ModelRuntime:
    model: str
    spec: dict[str, Any]
    learner: learners.Learner
    stats: RunningStats
    counters: Counters = field(default_factory=Counters)
    version: int = 0  # the stored version this runtime descends from
    stamp: Stamp | None = None  # last handled event
    seen: OrderedDict[str, None] = field(default_factory=OrderedDict)
    seen_keep: int = 10_000
    new_ids: list[tuple[int, str]] = field(default_factory=list)
    dirty: bool = False
    rewind: bool = False  # the stored stamp was void: the next write may go backwards
    last_reason: str = ""
    # the last rollback control event decided (docs/checkpoints.md): rollback events at or
    # below it on its partition are re-deliveries after the seek-back and are skipped
    barrier: Stamp | None = None
    unsee_above: int | None = None  # after a rollback: drop seen ids applied after it

    @classmethod
    def create(
        cls,
        spec: dict[str, Any],
        stored: StoredState | None,
        seen: list[str],
        *,
        seen_keep: int,
    ) -> ModelRuntime:
        """Build from the spec, then restore the checkpoint when there is one.

        Raises ``ValueError`` (bad spec or undecodable state) with a readable message.
        """
        model = str(spec["id"])
        if stored is None:
            learner = learners.build(str(spec["kind"]), int(spec["dim"]), **spec.get("params", {}))
            stats = RunningStats(learner.task, learner.dim)
            return cls(model, spec, learner, stats, seen_keep=seen_keep)
        learner = learners.load_state(decode_state(stored.state))
        stats = (
            RunningStats.from_state(decode_state(stored.stats))
            if stored.stats
            else RunningStats(learner.task, learner.dim)
        )
        rt = cls(
            model,
            spec,
            learner,
            stats,
            counters=Counters(**vars(stored.counters)),
            version=stored.version,
            stamp=stored.stamp,
            seen_keep=seen_keep,
            barrier=stored.barrier,
        )
        for event_id in seen[-seen_keep:] if seen_keep else []:
            rt.seen[event_id] = None
        return rt

    def covers(self, partition: int, offset: int) -> bool:
        """True when the state already includes the event at (partition, offset)."""
        s = self.stamp
        return s is not None and s.partition == partition and offset <= s.offset

    def handle(self, event: Event, partition: int, offset: int) -> str:
        if self.covers(partition, offset):
            return SKIPPED
        self.stamp = Stamp(partition, offset, event.id)
        self.dirty = True
        if event.id in self.seen:
            self.counters.duplicate += 1
            return DUPLICATE
        if event.type == "register":
            return self._register(event)
        try:
            report = self.learner.learn(event.x, event.y, hint=event.hint)
        except ValueError as exc:  # the base validates before touching state
            return self._reject(f"model {self.model!r} rejected the event: {exc}")
        self._applied(event.id)
        self.stats.update(
            np.asarray(event.x, dtype=np.float64),
            event.y,
            report.prediction,
            report.loss,
            report.diagnostics,
        )
        return APPLIED

    def _register(self, event: Event) -> str:
        """A transductive block (docs/events.md §3): ``learner.register(vectors)``."""
        register = getattr(self.learner, "register", None)
        if register is None:
            return self._reject(
                f"model {self.model!r} (kind {self.learner.kind}) does not take block registration"
            )
        try:
            register(event.vectors)
        except ValueError as exc:  # the learner leaves its state untouched
            return self._reject(f"model {self.model!r} refused the block: {exc}")
        self._applied(event.id)
        return APPLIED

    def _reject(self, reason: str) -> str:
        self.counters.rejected += 1
        self.last_reason = reason
        return REJECTED

    def _applied(self, event_id: str) -> None:
        c = self.counters
        c.applied += 1
        c.ids_sum = (c.ids_sum + id_hash(event_id)) & _MASK64
        if self.seen_keep:
            self.seen[event_id] = None
            if len(self.seen) > self.seen_keep:
                self.seen.popitem(last=False)
            self.new_ids.append((c.applied, event_id))

    def checkpoint_write(self, topic: str) -> CheckpointWrite:
        assert self.stamp is not None
        return CheckpointWrite(
            model=self.model,
            topic=topic,
            stamp=self.stamp,
            state=encode_state(self.learner.state()),
            counters=Counters(**vars(self.counters)),
            expected_version=self.version,
            stats=encode_state(self.stats.state()),
            new_ids=list(self.new_ids),
            rewind=self.rewind,
            barrier=self.barrier,
            unsee_above=self.unsee_above,
        )

    def written(self, version: int) -> None:
        self.version = version
        self.new_ids.clear()
        self.dirty = False
        self.rewind = False
        self.unsee_above = None
