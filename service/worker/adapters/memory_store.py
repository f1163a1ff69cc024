"""An in-memory ``ModelStore`` with the Redis store's semantics (``service/store/``): the
version check (``CONFLICT``), stamps that may not go backwards on a partition unless the
writer rewinds (``BACKWARDS``), the history of the last ``history_keep`` versions with
their counters and statistics, the seen window as one blob per model (appended to and
trimmed like the script does, or replaced whole; ``service/store/seen.py``), with the old
layout (ids scored by the ``applied`` count) still read and refused for an append, the
partition-models lists, the worker's counters and the shared dead-letter count.
The version check includes the write token, as the script's does.
``tests/service/test_worker_ports.py`` holds it against the Redis store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from service.store import seen as seen_layout
from service.store.checkpoints import (
    BACKWARDS,
    CONFLICT,
    OK,
    ROLLBACKS_KEEP,
    CheckpointWrite,
    Counters,
    HistoryEntry,
    RollbackRecord,
    StoredState,
    WriteResult,
)
from service.store.seen import SeenRecords
from service.worker.ports import StoredModels
from service.worker.refusals import LIST_KEEP, Refusals


def _copy(counters: Counters) -> Counters:
    return Counters(**vars(counters))


class MemoryStore:
    def __init__(
        self,
        *,
        worker_id: str = "",
        history_keep: int = 10,
        seen_keep: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.worker_id = worker_id
        self.history_keep = history_keep
        self.seen_keep = seen_keep
        self.clock = clock  # wall time of ``updated_at`` and the history entries
        self.specs: dict[str, dict[str, Any]] = {}
        self.states: dict[str, StoredState] = {}
        self.histories: dict[str, list[HistoryEntry]] = {}  # newest first
        self.halted: dict[str, str] = {}  # model -> why it stopped learning
        self.rollbacks_of: dict[str, dict[str, RollbackRecord]] = {}  # model -> event id -> it
        # model -> its seen blob, or in the old layout: event id -> applied count
        self.seen: dict[str, bytes | dict[str, int]] = {}
        self.partition_lists: dict[tuple[str, int], set[str]] = {}
        self.workers: dict[str, dict[str, str]] = {}
        self.deadletter_count = 0
        self.deadletter_lists: dict[str, list[bytes]] = {}  # model -> letters, newest first
        self.refused: dict[str, tuple[int, int]] = {}  # model -> recent (events, refused)
        self.run = 1  # the epoch: a simulation bumps it when the store loses writes
        self.closed = False

    # --- what the API does (service/store/registry.py) ------------------------------------
    def create(self, spec: dict[str, Any], *, topic: str | None = None) -> None:
        """Like ``create_spec``: with ``topic``, a spec with an origin is registered on its
        home partition."""
        self.specs[str(spec["id"])] = dict(spec)
        origin = spec.get("origin")
        if topic is not None and isinstance(origin, dict):
            key = (topic, int(origin["partition"]))
            self.partition_lists.setdefault(key, set()).add(str(spec["id"]))

    def delete(self, model: str) -> None:
        """Like ``delete_spec``: the spec, state, history and seen ids go, and the model
        leaves every partition list."""
        for table in (
            self.specs,
            self.states,
            self.histories,
            self.seen,
            self.halted,
            self.rollbacks_of,
        ):
            table.pop(model, None)
        for models in self.partition_lists.values():
            models.discard(model)

    def read_seen(self, model: str) -> SeenRecords:
        """The newest ``seen_keep`` ids of the window, as ``read_seen`` reads them."""
        stored = self.seen.get(model)
        if isinstance(stored, dict):  # the old layout: by score, then by id (a sorted set)
            scored = sorted(stored.items(), key=lambda kv: (kv[1], kv[0]))
            return seen_layout.from_ids(scored).newest(self.seen_keep)
        return seen_layout.decode(stored).newest(self.seen_keep) if stored else SeenRecords()

    # --- the ModelStore port --------------------------------------------------------------
    async def load(self, models: Sequence[str]) -> StoredModels:
        out = StoredModels()
        for m in models:
            if m in self.specs:
                out.specs[m] = dict(self.specs[m])
        for m in out.specs:
            state = self.states.get(m)
            out.states[m] = replace(state, counters=_copy(state.counters)) if state else None
            if state is not None:
                out.seen[m] = self.read_seen(m)
        return out

    async def write(
        self,
        writes: Sequence[CheckpointWrite],
        *,
        worker_stats: Mapping[str, str],
        deadletters: int,
        refusals: Refusals | None = None,
    ) -> list[WriteResult]:
        for w in writes:  # registered on its partition before its first stamp exists
            self.partition_lists.setdefault((w.topic, w.stamp.partition), set()).add(w.model)
        results = [self._write(w) for w in writes]
        self.workers.setdefault(self.worker_id, {}).update(worker_stats)
        self.deadletter_count += deadletters
        if refusals is not None:  # newest first, capped, as in Redis
            for m, letters in refusals.letters.items():
                listed = self.deadletter_lists.setdefault(m, [])
                listed[:0] = reversed(letters)
                del listed[LIST_KEEP:]
            self.refused.update(refusals.shares)
        return results

    def _write(self, w: CheckpointWrite) -> WriteResult:
        cur = self.states.get(w.model)
        version = cur.version if cur is not None else 0
        token = cur.token if cur is not None else ""
        if version != w.expected_version or token != w.expected_token:
            return WriteResult(w.model, CONFLICT, version)
        if not w.seen_whole and isinstance(self.seen.get(w.model), dict):
            return WriteResult(w.model, CONFLICT, version)  # old layout: reload, then replace
        spec = self.specs.get(w.model)
        if spec is None and w.incarnation:  # deleted
            return WriteResult(w.model, CONFLICT, version)
        if spec is not None and str(spec.get("incarnation", "")) != w.incarnation:
            return WriteResult(w.model, CONFLICT, version)  # deleted and created again
        old = cur.stamp if cur is not None else None
        if (
            not w.rewind
            and old is not None
            and old.partition == w.stamp.partition
            and old.offset > w.stamp.offset
        ):
            return WriteResult(w.model, BACKWARDS, version)
        now = self.clock()
        nv = version + 1
        self.states[w.model] = StoredState(
            model=w.model,
            state=w.state,
            version=nv,
            stamp=w.stamp,
            counters=_copy(w.counters),
            stats=w.stats or None,
            worker=self.worker_id,
            updated_at=now,
            barrier=w.barrier,
            token=w.token,
        )
        self.halted.pop(w.model, None)  # a write clears the note, as the script does
        if w.rollback is not None:  # listed with the state that holds it, as the script does
            listed = self.rollbacks_of.setdefault(w.model, {})
            listed[w.rollback.event_id] = w.rollback
            if len(listed) > ROLLBACKS_KEEP:
                del listed[min(listed.values(), key=lambda r: r.offset).event_id]
        if self.history_keep > 0:
            entry = HistoryEntry(nv, w.stamp, now, w.state, _copy(w.counters), w.stats or None)
            kept = self.histories.setdefault(w.model, [])
            kept.insert(0, entry)
            del kept[self.history_keep :]
        if w.seen_whole:
            self.seen.pop(w.model, None)
            if self.seen_keep > 0:
                self.seen[w.model] = w.seen
        else:
            blob0 = self.seen.get(w.model)
            assert not isinstance(blob0, dict)
            blob = seen_layout.append(blob0, w.seen, self.seen_keep)
            if blob is not None:
                self.seen[w.model] = blob
        return WriteResult(w.model, OK, nv)

    async def epoch(self) -> str:
        return str(self.run)

    async def heads(self, models: Sequence[str]) -> dict[str, tuple[int, str]]:
        out = {}
        for m in models:
            s = self.states.get(m)
            out[m] = (s.version, s.token) if s is not None else (0, "")
        return out

    async def history_entry(self, model: str, version: int) -> HistoryEntry | None:
        for entry in self.histories.get(model, []):
            if entry.version == version:
                return entry
        return None

    async def history(self, model: str) -> list[HistoryEntry]:
        return list(self.histories.get(model, []))

    async def note_halted(self, model: str, reason: str) -> None:
        self.halted[model] = reason

    async def rollbacks(self, model: str) -> list[RollbackRecord]:
        found = self.rollbacks_of.get(model, {}).values()
        return sorted(found, key=lambda r: (r.offset, r.event_id), reverse=True)

    async def seen_upto(self, model: str, applied: int) -> SeenRecords:
        return self.read_seen(model).upto(applied)

    async def partition_models(self, topic: str, partition: int) -> set[str]:
        return set(self.partition_lists.get((topic, partition), set()))

    async def forget(self, topic: str, partition: int, models: Sequence[str]) -> None:
        self.partition_lists.get((topic, partition), set()).difference_update(models)

    async def close(self) -> None:
        self.closed = True
