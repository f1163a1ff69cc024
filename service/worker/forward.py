"""Records of a model that arrive on another partition than its home: forwarded home
(docs/reliability.md, "Partitions").

A model is learned only on its home partition (its ``created`` marker's), so its events
are learned in one order by one worker. A producer that hashes keys another way
(librdkafka's default partitioner, ``consistent_random``, is CRC32; the Java client's and
aiokafka's is murmur2) puts them elsewhere. The worker owning that partition produces
the record, unchanged (key, value, so its event ids too), to the home partition, where it
is learned in that partition's order like any event.

Exactly once: the forwards of a batch are awaited (acked by the broker) at the end of the
batch, so before any checkpoint or offset commit that moves past the foreign records;
after a crash they are read and forwarded again, and the home model drops the second
copy by its id (the dedupe window). A partition whose records are read again from before
its committed Kafka offset (it holds no model of its own, or an idle one with an old
stamp) does not forward those again: every record below the committed offset was
forwarded and acked before that commit (``Assignment.forward_floor``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from service.worker.ports import Log, Record, TopicPartition
from service.worker.telemetry import WorkerStats

logger = logging.getLogger(__name__)


class Forwarder:
    def __init__(self, log: Log, stats: WorkerStats) -> None:
        self.log = log
        self.stats = stats
        self.pending: list[Awaitable[Any]] = []
        self.reached: dict[TopicPartition, int] = {}  # past the last record forwarded

    async def send(self, rec: Record, home: int) -> None:
        """Produce ``rec`` as it is to partition ``home`` of its topic."""
        assert rec.value is not None  # a record without a value never decodes
        logger.debug(
            "forwarding %s[%d]@%d to partition %d", rec.topic, rec.partition, rec.offset, home
        )
        self.pending.append(await self.log.produce(rec.topic, rec.value, rec.key, home))
        self.stats.forwarded += 1
        tp = TopicPartition(rec.topic, rec.partition)
        self.reached[tp] = max(self.reached.get(tp, 0), rec.offset + 1)

    async def flush(self) -> dict[TopicPartition, int]:
        """Wait until the broker has every forward queued (before any checkpoint); returns,
        per partition, the offset past the last record forwarded."""
        reached, self.reached = self.reached, {}
        if self.pending:
            pending, self.pending = self.pending, []
            await asyncio.gather(*pending)
        return reached
