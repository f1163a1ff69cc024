"""The ``Log`` port on aiokafka: the group consumer, a group-less probe and a producer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener
from aiokafka.errors import IllegalStateError, KafkaError, OffsetOutOfRangeError
from aiokafka.structs import OffsetAndMetadata

from service.config import Settings
from service.worker.ports import (
    Batch,
    CommitFailed,
    FetchedAt,
    Probe,
    RebalanceHandler,
    Record,
    TopicPartition,
)

logger = logging.getLogger(__name__)

SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_MS = 1_000
# How long the broker may hold a fetch that finds no new data. aiokafka keeps one fetch in
# flight per broker and leaves out partitions whose records are still buffered, so while a
# batch is being learned the next fetch asks only for the idle partitions and the broker
# holds it for this long before the busy partition can be fetched again. At the default
# (500 ms) a worker with one busy partition of four sat idle 60% of the time. The default
# of ONLINEPREDICT_FETCH_MAX_WAIT_MS (tansu's s3 engine stalls at it: `up --durable` uses 250).
FETCH_MAX_WAIT_MS = 20
PROBE_TIMEOUT_MS = 2000
PROBE_SLICE_MS = 50
PROBE_ATTEMPTS = 5


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka wants its own listener class; this one hands the calls on."""

    def __init__(self, handler: RebalanceHandler) -> None:
        self.handler = handler

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.handler.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.handler.on_partitions_assigned(assigned)


class KafkaLog:
    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        producer: AIOKafkaProducer,
        probe: AIOKafkaConsumer,
    ) -> None:
        self.consumer = consumer
        self.producer = producer
        self.probe = probe  # group-less consumer that reads the record at a stamp

    @classmethod
    def from_settings(cls, settings: Settings, client_id: str) -> KafkaLog:
        kafka = settings.kafka_options()
        consumer = AIOKafkaConsumer(
            group_id=settings.consumer_group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=settings.max_poll_records,
            session_timeout_ms=settings.consumer_session_timeout_ms,
            heartbeat_interval_ms=min(HEARTBEAT_MS, settings.consumer_session_timeout_ms // 3),
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            client_id=client_id,
            **kafka,
        )
        producer = AIOKafkaProducer(acks="all", linger_ms=5, **kafka)
        probe = AIOKafkaConsumer(
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="none",
            fetch_max_wait_ms=settings.fetch_max_wait_ms,  # an empty answer comes back at once
            # it keeps one record per read; unpacking a whole fetch cost the worker a quarter
            # of its CPU before each checkpoint (benchmarks/README.md, "peers")
            max_poll_records=1,
            **kafka,
        )
        return cls(consumer, producer, probe)

    async def start(self) -> None:
        await self.producer.start()
        await self.probe.start()

    async def subscribe(self, topic: str, listener: RebalanceHandler) -> None:
        self.consumer.subscribe([topic], listener=_Listener(listener))
        await self.consumer.start()

    async def getmany(self, *, timeout_ms: int, max_records: int) -> Batch:
        batch: Batch = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        return batch

    def assignment(self) -> set[TopicPartition]:
        assigned: set[TopicPartition] = self.consumer.assignment()
        return assigned

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.consumer.seek(tp, offset)

    async def position(self, tp: TopicPartition) -> int:
        return int(await self.consumer.position(tp))

    async def committed(self, tp: TopicPartition) -> int | None:
        try:
            committed: int | None = await self.consumer.committed(tp)
        except (KafkaError, IllegalStateError) as exc:
            # only a floor for forwarding (service/worker/forward.py): without it, records
            # are forwarded again and dropped at home by their ids
            logger.warning("committed offset of %s[%d] unknown: %s", tp.topic, tp.partition, exc)
            return None
        return committed

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        try:
            await self.consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
        except (KafkaError, IllegalStateError) as exc:
            raise CommitFailed(str(exc)) from exc

    async def beginning_offset(self, tp: TopicPartition) -> int:
        return int((await self.consumer.beginning_offsets([tp]))[tp])

    def highwater(self, tp: TopicPartition) -> int | None:
        highwater: int | None = self.consumer.highwater(tp)
        return highwater

    def fetch_clock(self) -> FetchedAt:
        def fetched_at(tp: TopicPartition) -> float | None:
            try:
                ms = self.consumer.last_poll_timestamp(tp)
            except AssertionError:  # revoked in between: no answer for it
                return None
            return None if ms is None else ms / 1000.0

        return fetched_at

    async def read_at(self, tp: TopicPartition, offset: int) -> Record | Probe:
        """Reads the record itself (the probe's auto_offset_reset is "none", so an offset
        past the end raises instead of jumping): the broker's ListOffsets answer is not
        trusted, as tansu reports the last batch's base offset + 1 there."""
        found = await self._read({tp: offset}, PROBE_ATTEMPTS)
        return found[tp]

    async def read_many(
        self, points: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Record | Probe]:
        """One probe fetch for every partition at once (a checkpoint's witnesses), given up
        after one probe timeout: it runs before each checkpoint write, which must not wait
        out a broker that is down (what it cannot read it leaves unknown)."""
        return await self._read(points, 1)

    async def _read(
        self, points: Mapping[TopicPartition, int], attempts: int
    ) -> dict[TopicPartition, Record | Probe]:
        """Waits in short slices and looks at each partition's high watermark after every
        answer: tansu answers a fetch past the end with nothing rather than an error, and
        waiting out the whole timeout for each void stamp made a restart take minutes."""
        out: dict[TopicPartition, Record | Probe] = {}
        probe = self.probe
        probe.assign(list(points))
        for _ in range(attempts):
            todo = [tp for tp in points if tp not in out]
            if not todo:
                break
            for tp in todo:
                probe.seek(tp, points[tp])
            for _ in range(PROBE_TIMEOUT_MS // PROBE_SLICE_MS):
                try:
                    batch = await probe.getmany(*todo, timeout_ms=PROBE_SLICE_MS)
                except OffsetOutOfRangeError as exc:
                    gone = _out_of_range(exc, todo)
                    out.update(dict.fromkeys(gone, Probe.PAST_END))
                    todo = [tp for tp in todo if tp not in gone]
                    if not todo:
                        break
                    continue
                for tp, records in batch.items():
                    if records and tp in todo:
                        out[tp] = records[0]
                for tp in todo:
                    highwater = probe.highwater(tp)
                    if tp not in out and highwater is not None and highwater <= points[tp]:
                        out[tp] = Probe.PAST_END
                todo = [tp for tp in todo if tp not in out]
                if not todo:
                    break
        for tp in points:
            out.setdefault(tp, Probe.UNREADABLE)
        return out

    async def produce(
        self, topic: str, value: bytes, key: bytes | None, partition: int | None = None
    ) -> Awaitable[Any]:
        delivery: Awaitable[Any] = await self.producer.send(
            topic, value, key=key, partition=partition
        )
        return delivery

    async def leave(self) -> None:
        await self.consumer.stop()

    async def stop_probe(self) -> None:
        await self.probe.stop()

    async def stop_producer(self) -> None:
        await self.producer.stop()


def _out_of_range(exc: OffsetOutOfRangeError, todo: list[TopicPartition]) -> set[TopicPartition]:
    """The partitions an ``OffsetOutOfRangeError`` names (aiokafka passes ``{tp: offset}``);
    all of ``todo`` when it names none."""
    named = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    return {tp for tp in todo if tp in named} or set(todo)
