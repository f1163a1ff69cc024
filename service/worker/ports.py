"""The worker's two ports: the event ``Log`` (transport) and the ``ModelStore`` (state).

The loop, the checkpoint, the rebalance and the rollback logic see only these protocols;
``service/worker/adapters/`` holds the implementations: aiokafka + Redis for the service,
in-memory ones (same semantics, no I/O) for deterministic tests and simulations.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# A plain (topic, partition) named tuple: the value type of both adapters.
from aiokafka.structs import TopicPartition

from service.store.checkpoints import (
    CheckpointWrite,
    HistoryEntry,
    RollbackRecord,
    StoredState,
    WriteResult,
)
from service.store.seen import SeenRecords
from service.worker.refusals import Refusals

__all__ = [
    "Batch",
    "CommitFailed",
    "FetchedAt",
    "Log",
    "ModelStore",
    "Probe",
    "Reader",
    "RebalanceHandler",
    "Record",
    "StoreUnavailable",
    "StoredModels",
    "TopicPartition",
]


class Record(Protocol):
    """One record of the log (aiokafka's ``ConsumerRecord`` is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


Batch = Mapping[TopicPartition, Sequence[Record]]
FetchedAt = Callable[[TopicPartition], float | None]  # wall-clock s of the last fetch answer


class Probe(enum.Enum):
    """What :meth:`Log.read_at` found instead of a record."""

    PAST_END = "past the end"  # the log ends at or before the offset (or starts after it)
    UNREADABLE = "unreadable"  # no answer after a few attempts


class CommitFailed(Exception):
    """The offset commit did not go through (a rebalance, the broker); a hint only."""


class StoreUnavailable(RuntimeError):
    """The store stayed unreachable past the shutdown grace period."""


class RebalanceHandler(Protocol):
    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...
    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...


class Reader(Protocol):
    """What the divergence search reads of the log (a ``Log`` is one)."""

    async def beginning_offset(self, tp: TopicPartition) -> int: ...

    async def read_at(self, tp: TopicPartition, offset: int) -> Record | Probe: ...


class Log(Protocol):
    """The partitioned event log: a group consumer, a probe reader and a producer."""

    async def start(self) -> None:
        """Connect the producer and the probe (before joining the group)."""

    async def subscribe(self, topic: str, listener: RebalanceHandler) -> None:
        """Join the consumer group on ``topic``; ``listener`` hears every (re)assignment."""

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Batch:
        """The next records of the assigned partitions, per partition in offset order."""

    def assignment(self) -> set[TopicPartition]: ...

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch ``tp`` from ``offset`` next (records already fetched may still come)."""

    async def position(self, tp: TopicPartition) -> int: ...

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset of ``tp``, if any."""

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit the group's offsets; raises :class:`CommitFailed`."""

    async def beginning_offset(self, tp: TopicPartition) -> int: ...

    def highwater(self, tp: TopicPartition) -> int | None:
        """The end of ``tp`` as of the last fetch (None before the first)."""

    def fetch_clock(self) -> FetchedAt | None:
        """When each partition's last fetch answer came (wall-clock s; None for a
        partition with none yet), so a drain knows which ``highwater`` is recent; None
        when fetches are answered at once (in memory)."""

    async def read_at(self, tp: TopicPartition, offset: int) -> Record | Probe:
        """The first record at or after ``offset``, read outside the group."""

    async def read_many(
        self, points: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Record | Probe]:
        """``read_at`` for one offset in each of several partitions, in one round trip
        where the client allows."""

    async def produce(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None = None
    ) -> Awaitable[Any]:
        """Queue a record (to ``partition``, else the key's); the result completes when
        the broker has it."""

    async def leave(self) -> None:
        """Leave the consumer group (commits nothing)."""

    async def stop_probe(self) -> None: ...

    async def stop_producer(self) -> None:
        """Flush what was produced, then close."""


@dataclass
class StoredModels:
    """What a worker loads for some models: specs (unknown ids left out), latest states
    (None: no checkpoint yet) and seen windows (for the models with a state)."""

    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    states: dict[str, StoredState | None] = field(default_factory=dict)
    seen: dict[str, SeenRecords] = field(default_factory=dict)


class ModelStore(Protocol):
    """Model specs and offset-stamped checkpoints (docs/design.md, "Checkpoints")."""

    async def load(self, models: Sequence[str]) -> StoredModels: ...

    async def write(
        self,
        writes: Sequence[CheckpointWrite],
        *,
        worker_stats: Mapping[str, str],
        deadletters: int,
        refusals: Refusals | None = None,
    ) -> list[WriteResult]:
        """One checkpoint: each model's state + stamp (version-checked, one result per
        write, in order), the worker's counters and the dead letters sent since the last
        (their count; ``refusals``: each model's new letters and recent refused share)."""

    async def epoch(self) -> str:
        """Changes whenever the store may have lost writes it acknowledged (Redis: its
        ``run_id``, new on every restart and on a replica that takes over)."""

    async def heads(self, models: Sequence[str]) -> dict[str, tuple[int, str]]:
        """Each model's stored version and write token; ``(0, "")`` without a state."""

    async def history_entry(self, model: str, version: int) -> HistoryEntry | None: ...

    async def history(self, model: str) -> list[HistoryEntry]:
        """The kept checkpoints, newest first."""

    async def note_halted(self, model: str, reason: str) -> None:
        """Record why a model stopped learning, for its status (the next checkpoint
        written for it clears the note)."""

    async def rollbacks(self, model: str) -> list[RollbackRecord]:
        """The model's listed undoing rollbacks (written with the checkpoints), newest first."""

    async def seen_upto(self, model: str, applied: int) -> SeenRecords:
        """The seen window's ids applied up to the ``applied`` count, oldest first."""

    async def partition_models(self, topic: str, partition: int) -> set[str]: ...

    async def forget(self, topic: str, partition: int, models: Sequence[str]) -> None:
        """Take deleted models off the partition's list."""

    async def close(self) -> None: ...
