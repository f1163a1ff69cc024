"""An in-memory ``Log``: partitions as lists of records, the group's assignment driven by the
caller (``MemoryLog.rebalance``). No I/O, no clock, no randomness: a test or a simulation
decides every fetch and every rebalance.

Semantics kept from the broker: offsets start at the partition's beginning (records
below it were deleted, ``MemoryBroker.truncate``); a fresh assignment starts at the group's
committed offset, else at the beginning (``auto_offset_reset="earliest"``, also where a
fetch position is past the end: the log was cut under the consumer); a rebalance
revokes every partition then assigns the new set (the eager protocol aiokafka runs);
seeking or committing a partition that is not assigned fails; the high watermark is known
once a fetch answered (after the first poll).
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from service.worker.ports import (
    Batch,
    CommitFailed,
    Probe,
    RebalanceHandler,
    Record,
    TopicPartition,
)


@dataclass(frozen=True)
class MemoryRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class MemoryBroker:
    """The partitions of every topic and the one consumer group's committed offsets,
    shared by the ``MemoryLog`` of each worker."""

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self.records: dict[TopicPartition, list[MemoryRecord]] = {}
        self.begin: dict[TopicPartition, int] = {}  # offset of records[tp][0]
        self.committed: dict[TopicPartition, int] = {}
        for topic, partitions in (topics or {}).items():
            self.create_topic(topic, partitions)

    def create_topic(self, topic: str, partitions: int) -> None:
        for p in range(partitions):
            tp = TopicPartition(topic, p)
            self.records.setdefault(tp, [])
            self.begin.setdefault(tp, 0)

    def partitions(self, topic: str) -> list[TopicPartition]:
        return sorted(tp for tp in self.records if tp.topic == topic)

    def end(self, tp: TopicPartition) -> int:
        return self.begin[tp] + len(self.records[tp])

    def append(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> MemoryRecord:
        """Append to ``partition``, or to the key's partition (crc32; the first one when
        there is no key); a topic not seen yet gets one partition."""
        if not self.partitions(topic):
            self.create_topic(topic, 1)
        if partition is None:
            n = len(self.partitions(topic))
            partition = zlib.crc32(key) % n if key is not None else 0
        tp = TopicPartition(topic, partition)
        rec = MemoryRecord(topic, partition, self.end(tp), key, value)
        self.records[tp].append(rec)
        return rec

    def truncate(self, tp: TopicPartition, before: int) -> None:
        """Delete the records below ``before`` (retention)."""
        drop = max(0, min(before, self.end(tp)) - self.begin[tp])
        del self.records[tp][:drop]
        self.begin[tp] += drop

    def reset(self, tp: TopicPartition) -> None:
        """Lose the partition (a memory-only broker restarted): offsets start over at 0."""
        self.records[tp] = []
        self.begin[tp] = 0
        self.committed.pop(tp, None)

    def read(self, tp: TopicPartition, offset: int, limit: int) -> list[MemoryRecord]:
        start = max(offset, self.begin[tp]) - self.begin[tp]
        return self.records[tp][start : start + limit]


class MemoryLog:
    """One worker's view of a :class:`MemoryBroker`: its consumer, probe and producer."""

    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self.topic: str | None = None
        self.listener: RebalanceHandler | None = None
        self.assigned: set[TopicPartition] = set()
        self.positions: dict[TopicPartition, int] = {}
        self.fetched: set[TopicPartition] = set()  # partitions a fetch answered for
        self.started = False
        self.closed = False

    # --- driven by the caller -------------------------------------------------------------
    async def rebalance(self, partitions: Iterable[TopicPartition]) -> None:
        """The group's new assignment for this member: revoke everything, then assign."""
        if self.listener is None:
            raise RuntimeError("rebalance before subscribe")
        await self.listener.on_partitions_revoked(set(self.assigned))
        self.assigned = set(partitions)
        self.positions = {}
        self.fetched &= self.assigned
        for tp in self.assigned:
            committed = self.broker.committed.get(tp)
            self.positions[tp] = committed if committed is not None else self.broker.begin[tp]
        await self.listener.on_partitions_assigned(set(self.assigned))

    # --- the Log port ---------------------------------------------------------------------
    async def start(self) -> None:
        self.started = True

    async def subscribe(self, topic: str, listener: RebalanceHandler) -> None:
        self.topic, self.listener = topic, listener

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Batch:
        await asyncio.sleep(0)  # a poll yields to the loop, like the client's
        batch: dict[TopicPartition, list[Record]] = {}
        room = max_records
        self.fetched |= self.assigned  # one fetch asks for every assigned partition
        for tp in sorted(self.assigned):
            if room <= 0:
                break
            if self.positions[tp] > self.broker.end(tp):  # out of range (a log cut under
                self.positions[tp] = self.broker.begin[tp]  # it): auto_offset_reset="earliest"
            records = self.broker.read(tp, self.positions[tp], room)
            if records:
                batch[tp] = list(records)
                self.positions[tp] = records[-1].offset + 1
                room -= len(records)
        return batch

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self.assigned:
            raise RuntimeError(f"seek on {tp}, which is not assigned")
        self.positions[tp] = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.positions[tp]

    async def committed(self, tp: TopicPartition) -> int | None:
        return self.broker.committed.get(tp)

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        if not set(offsets) <= self.assigned:
            raise CommitFailed("commit of a partition that is not assigned")
        self.broker.committed.update(offsets)

    async def beginning_offset(self, tp: TopicPartition) -> int:
        return self.broker.begin[tp]

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.broker.end(tp) if tp in self.fetched else None

    def fetch_clock(self) -> None:
        return None  # a fetch is answered at once: its highwater is the end now

    async def read_at(self, tp: TopicPartition, offset: int) -> Record | Probe:
        if offset < self.broker.begin[tp]:
            return Probe.PAST_END  # out of range, as the probe's "none" reset reports it
        records = self.broker.read(tp, offset, 1)
        return records[0] if records else Probe.PAST_END

    async def read_many(
        self, points: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Record | Probe]:
        return {tp: await self.read_at(tp, offset) for tp, offset in points.items()}

    async def produce(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None = None
    ) -> Awaitable[Any]:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(self.broker.append(topic, value, key, partition))
        return done

    async def leave(self) -> None:
        self.assigned, self.positions = set(), {}

    async def stop_probe(self) -> None:
        pass

    async def stop_producer(self) -> None:
        self.closed = True
