"""The in-memory adapters as one simulated worker sees them: every port call passes a gate
where the fault schedule can crash the worker (before or after the call took effect), pause
it (a zombie), or hold it while the store or the broker is down. Behaviour otherwise is the
real adapters' (``MemoryLog`` subclassed, ``MemoryStore`` shared and wrapped)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from service.store.checkpoints import CheckpointWrite, HistoryEntry, RollbackRecord, WriteResult
from service.worker.adapters.memory_log import MemoryBroker, MemoryLog
from service.worker.adapters.memory_store import MemoryStore
from service.worker.ports import (
    Batch,
    CommitFailed,
    Probe,
    RebalanceHandler,
    Record,
    StoredModels,
    TopicPartition,
)
from service.worker.refusals import Refusals

if TYPE_CHECKING:
    from tests.sim.world import Node

T = TypeVar("T")


class SimCrash(BaseException):
    """The worker process died here (a BaseException: no handler in the worker catches
    it, as none catches a SIGKILL)."""


async def passing(node: Node, name: str, call: Callable[[], Awaitable[T]]) -> T:
    await node.gate(name)
    out = await call()
    node.after(name)
    return out


class SimLog(MemoryLog):
    def __init__(self, broker: MemoryBroker, node: Node) -> None:
        super().__init__(broker)
        self.node = node

    async def start(self) -> None:
        await passing(self.node, "log.start", super().start)

    async def subscribe(self, topic: str, listener: RebalanceHandler) -> None:
        await passing(
            self.node, "log.subscribe", lambda: super(SimLog, self).subscribe(topic, listener)
        )

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Batch:
        await self.node.gate("log.getmany")
        if self.node.world.broker_down:  # the poll times out empty
            out: Batch = {}
        else:
            out = await super().getmany(timeout_ms=timeout_ms, max_records=max_records)
        self.node.after("log.getmany")
        return out

    async def position(self, tp: TopicPartition) -> int:
        return await passing(self.node, "log.position", lambda: super(SimLog, self).position(tp))

    async def committed(self, tp: TopicPartition) -> int | None:
        return await passing(self.node, "log.committed", lambda: super(SimLog, self).committed(tp))

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        await self.node.gate("log.commit")
        if self.node.world.broker_down or not self.node.member:
            raise CommitFailed("broker down, or not in the group's generation")
        await super().commit(offsets)
        self.node.after("log.commit")

    async def beginning_offset(self, tp: TopicPartition) -> int:
        return await passing(
            self.node, "log.beginning_offset", lambda: super(SimLog, self).beginning_offset(tp)
        )

    async def read_at(self, tp: TopicPartition, offset: int) -> Record | Probe:
        await self.node.gate("log.read_at")
        if self.node.world.broker_down:
            return Probe.UNREADABLE
        out = await super().read_at(tp, offset)
        self.node.after("log.read_at")
        return out

    async def produce(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None = None
    ) -> Awaitable[Any]:
        return await passing(
            self.node,
            "log.produce",
            lambda: super(SimLog, self).produce(topic, value, key, partition),
        )

    async def leave(self) -> None:
        await passing(self.node, "log.leave", super().leave)


class SimStore:
    """One worker's connection to the shared store."""

    def __init__(self, store: MemoryStore, node: Node) -> None:
        self.store = store
        self.node = node

    async def load(self, models: Sequence[str]) -> StoredModels:
        return await passing(self.node, "store.load", lambda: self.store.load(models))

    async def write(
        self,
        writes: Sequence[CheckpointWrite],
        *,
        worker_stats: Mapping[str, str],
        deadletters: int,
        refusals: Refusals | None = None,
    ) -> list[WriteResult]:
        await self.node.gate("store.write")
        out = await self.store.write(
            writes, worker_stats=worker_stats, deadletters=deadletters, refusals=refusals
        )
        self.node.world.snapshot()  # what an AOF holds, write by write
        self.node.after("store.write")
        return out

    async def history_entry(self, model: str, version: int) -> HistoryEntry | None:
        return await passing(
            self.node, "store.history_entry", lambda: self.store.history_entry(model, version)
        )

    async def epoch(self) -> str:
        return await passing(self.node, "store.epoch", self.store.epoch)

    async def heads(self, models: Sequence[str]) -> dict[str, tuple[int, str]]:
        return await passing(self.node, "store.heads", lambda: self.store.heads(models))

    async def history(self, model: str) -> list[HistoryEntry]:
        return await passing(self.node, "store.history", lambda: self.store.history(model))

    async def note_halted(self, model: str, reason: str) -> None:
        await passing(self.node, "store.note_halted", lambda: self.store.note_halted(model, reason))

    async def rollbacks(self, model: str) -> list[RollbackRecord]:
        return await passing(self.node, "store.rollbacks", lambda: self.store.rollbacks(model))

    async def seen_upto(self, model: str, applied: int) -> list[str]:
        return await passing(
            self.node, "store.seen_upto", lambda: self.store.seen_upto(model, applied)
        )

    async def partition_models(self, topic: str, partition: int) -> set[str]:
        return await passing(
            self.node,
            "store.partition_models",
            lambda: self.store.partition_models(topic, partition),
        )

    async def forget(self, topic: str, partition: int, models: Sequence[str]) -> None:
        await passing(
            self.node, "store.forget", lambda: self.store.forget(topic, partition, models)
        )

    async def close(self) -> None:
        pass


__all__ = ["SimCrash", "SimLog", "SimStore", "asyncio"]
