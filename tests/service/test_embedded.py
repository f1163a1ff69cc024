"""The wheel-shipped broker and Redis start, answer, serve real clients and stop."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis

from service.embedded import (
    broker_answers,
    free_port,
    redis_answers,
    start_broker,
    start_redis,
)
from service.embedded.topics import ensure_topics

pytestmark = pytest.mark.service


def test_redis_starts_answers_and_stops() -> None:
    server = start_redis()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.set("k", "v") and client.get("k") == b"v"
        client.close()
    finally:
        server.stop()
    assert not server.running()
    assert not redis_answers(server.host, server.port)


def test_persistent_redis_keeps_writes_across_restart(tmp_path) -> None:
    port = free_port()
    server = start_redis(port=port, data_dir=str(tmp_path), persist=True)
    client = redis.Redis.from_url(server.url)
    client.hset("h", mapping={"a": "1"})
    client.close()
    server.kill()  # a crash, not a clean shutdown
    server = start_redis(port=port, data_dir=str(tmp_path), persist=True)
    try:
        client = redis.Redis.from_url(server.url)
        assert client.hget("h", "a") == b"1"
        client.close()
    finally:
        server.stop()


def test_broker_on_given_port_stops_cleanly() -> None:
    port = free_port()
    broker = start_broker(port=port)
    assert broker.url.endswith(f":{port}") and broker_answers("127.0.0.1", port)
    broker.stop()
    assert broker.proc.returncode is not None
    assert not broker_answers("127.0.0.1", port)


async def _consume(settings, *, group_id: str, want: int) -> list[bytes]:
    """Read the events topic from the start until ``want`` values came (or ~12 s passed)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        settings.events_topic,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **settings.kafka_options(),
    )
    await consumer.start()
    got: list[bytes] = []
    try:
        for _ in range(60):
            batch = await consumer.getmany(timeout_ms=200)
            got += [r.value for rs in batch.values() for r in rs]
            if len(got) >= want:
                break
    finally:
        await consumer.stop()
    return got


def test_aiokafka_producer_and_consumer(settings) -> None:
    from aiokafka import AIOKafkaProducer

    async def roundtrip() -> list[bytes]:
        producer = AIOKafkaProducer(**settings.kafka_options())
        await producer.start()
        try:
            for i in range(20):
                await producer.send(settings.events_topic, b"a%d" % i, key=b"m%d" % (i % 3))
            await producer.flush()
        finally:
            await producer.stop()
        return await _consume(settings, group_id=f"g-{uuid.uuid4().hex[:6]}", want=20)

    got = asyncio.run(roundtrip())
    assert sorted(v for v in got if v.startswith(b"a")) == sorted(b"a%d" % i for i in range(20))


def test_confluent_kafka_producer(make_settings) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")

    st = make_settings()
    # The embedded broker has no idempotent producer support: keep it off explicitly.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": st.kafka_bootstrap, "enable.idempotence": False}
    )
    errors: list[object] = []
    for i in range(10):
        producer.produce(
            st.events_topic,
            value=b"c%d" % i,
            key=b"m",
            on_delivery=lambda err, msg: errors.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert errors == []

    assert asyncio.run(_consume(st, group_id="g", want=10)) == [
        b"c%d" % i for i in range(10)
    ]  # one key: one partition


def test_ensure_topics_is_idempotent(make_settings) -> None:
    st = make_settings()
    asyncio.run(ensure_topics(st))  # second call: topics exist, no error
