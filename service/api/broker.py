"""The API's Kafka producer, started lazily so the API comes up (and answers 503) while the
broker is down, and retried on the next request after a failure."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from clients import wire
from service.config import Settings

logger = logging.getLogger(__name__)
STOP_TIMEOUT_S = 10.0

REQUEST_TIMEOUT_MS = 10_000  # bounds how long a request waits for a dead broker
SEND_TIMEOUT_S = 15.0


class BrokerUnavailable(RuntimeError):
    """Kafka cannot be reached; the API answers 503."""


class LazyProducer:
    """An ``AIOKafkaProducer`` started on first use; ``close()`` stops it."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        async with self._lock:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    **self._settings.kafka_options(),
                    acks="all",
                    # The testbed broker has no idempotent producers; dedupe is by event id.
                    enable_idempotence=False,
                    request_timeout_ms=REQUEST_TIMEOUT_MS,
                    max_request_size=max(self._settings.max_body_bytes * 2, 1_048_576),
                )
                try:
                    await producer.start()
                except (KafkaError, OSError) as exc:
                    await _quiet_stop(producer)
                    raise BrokerUnavailable(f"Kafka unavailable: {exc}") from exc
                self._producer = producer
        return self._producer

    async def send_all(
        self,
        topic: str,
        key: str,
        events: list[dict[str, Any]],
        *,
        partition: int | None = None,
    ) -> list[tuple[int, int]]:
        """Produce ``events`` in order under one key (to ``partition`` when given: a model's
        home partition) and wait until every one is acked; their (partition, offset)s."""
        values = [wire.encode_value(e) for e in events]
        return await self.send_values(topic, key, values, partition=partition)

    async def send_values(
        self, topic: str, key: str, values: list[bytes], *, partition: int | None = None
    ) -> list[tuple[int, int]]:
        """``send_all`` for record values already encoded (a JSON event or a frame)."""
        producer = await self.get()
        try:
            async with asyncio.timeout(SEND_TIMEOUT_S):
                futures = [
                    await producer.send(
                        topic,
                        value=v,
                        key=wire.encode_key(key),
                        partition=partition,
                    )
                    for v in values
                ]
                acks = await asyncio.gather(*futures)
        except (KafkaError, TimeoutError, OSError) as exc:
            raise BrokerUnavailable(f"Kafka unavailable: {type(exc).__name__}: {exc}") from exc
        return [(md.partition, md.offset) for md in acks]

    async def ping(self, topic: str) -> None:
        """Raise ``BrokerUnavailable`` unless the cluster metadata can be fetched now and
        lists ``topic``."""
        producer = await self.get()
        try:
            async with asyncio.timeout(5.0):
                cluster = await producer.client.fetch_all_metadata()
        except (KafkaError, TimeoutError, OSError) as exc:
            raise BrokerUnavailable(f"Kafka unavailable: {exc}") from exc
        if topic not in cluster.topics():
            raise BrokerUnavailable(f"topic {topic!r} does not exist (yet)")

    async def close(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await _quiet_stop(producer)


async def _quiet_stop(producer: AIOKafkaProducer) -> None:
    """Stop within ``STOP_TIMEOUT_S``: aiokafka's stop waits for every pending batch, and a
    batch the broker never answers held an API's shutdown for ten minutes in a test run.
    Nothing acknowledged is lost by giving up: a request is answered 202 only after its
    records are acked."""
    try:
        async with asyncio.timeout(STOP_TIMEOUT_S):
            await producer.stop()
    except TimeoutError:
        logger.warning("the Kafka producer did not stop within %.0f s; left behind", STOP_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - shutting down; nothing useful to do with it
        logger.debug("error while stopping the Kafka producer", exc_info=True)
