"""The Kafka producer helper: the wire format, and a real round trip through the broker."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import numpy as np
import pandas as pd
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from clients.producer import EventProducer, encode_event, make_event
from clients.wire import is_frame
from service.worker.frames import decode_frame


def test_event_has_design_md_fields() -> None:
    e = make_event("m1", np.array([1, 2.5]), np.float64(0.5), ts=12.0)
    assert set(e) == {"model", "id", "x", "y", "ts"}
    assert e["x"] == [1.0, 2.5] and e["y"] == 0.5 and e["ts"] == 12.0
    assert uuid.UUID(e["id"]).version == 4
    assert make_event("m1", [0.0], None)["y"] is None  # unlabelled
    assert make_event("m1", [0.0], False)["y"] == -1  # booleans as -1/+1
    assert make_event("m1", [0.0], 1.0, hint=0.3)["hint"] == 0.3
    assert json.loads(encode_event(e)) == e


def test_bad_vectors_are_refused_before_sending() -> None:
    with pytest.raises(ValueError):
        make_event("m", [1.0, float("inf")])
    with pytest.raises(ValueError):
        make_event("m", [[1.0], [2.0]])


def test_unstarted_producer_says_so() -> None:
    producer = EventProducer("127.0.0.1:1")
    with pytest.raises(RuntimeError, match="not started"):
        asyncio.run(producer.send("m", [1.0]))


async def _read(
    bootstrap: str, topic: str, keys: set[bytes], n: int, timeout: float = 20.0
) -> list[Any]:
    """Records keyed by one of ``keys``, read from the start until ``n`` are found."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = await consumer._client._wait_on_metadata(topic)  # noqa: SLF001
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(records) < n and loop.time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(r for r in batch if r.key in keys)
        return records
    finally:
        await consumer.stop()


def _events(record: Any) -> list[dict[str, Any]]:
    """A record's events as JSON dicts: a frame's rows (the worker's decoder), or one."""
    if is_frame(record.value):
        f = decode_frame(record.key, record.value)
        return [f.row_event(i) for i in range(len(f))]
    return [json.loads(record.value)]


async def test_frames_round_trip_keyed_by_model(make_settings: Any) -> None:
    settings = make_settings()
    bootstrap, topic = settings.kafka_bootstrap, settings.events_topic
    model = f"frame-{uuid.uuid4().hex[:6]}"
    X = np.random.default_rng(1).standard_normal((30, 3))
    async with EventProducer(bootstrap, topic=topic) as producer:
        ids = await producer.send_many(model, X, X[:, 0], hints=[0.5] * 30)
    [record] = await _read(bootstrap, topic, {model.encode()}, 1)
    assert is_frame(record.value)  # one record: the default format is the frame
    f = decode_frame(record.key, record.value)
    assert f.ids == ids and f.X.tolist() == X.tolist() and f.labels() == X[:, 0].tolist()
    assert f.hint_list() == [0.5] * 30 and not f.bad


@pytest.mark.parametrize("wire_format", ["json", "frame"])
async def test_round_trip_keyed_by_model(make_settings: Any, wire_format: str) -> None:
    settings = make_settings()  # topics of its own
    bootstrap, topic = settings.kafka_bootstrap, settings.events_topic
    models = [f"prod-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    frame = pd.DataFrame(np.random.default_rng(0).standard_normal((40, 4)))
    sent: dict[str, list[str]] = {}
    async with EventProducer(bootstrap, topic=topic) as producer:
        for m in models:
            sent[m] = await producer.send_many(m, frame, frame[0] * 2.0, format=wire_format)
        one = await producer.send(models[0], [1.0, 2.0, 3.0, 4.0], None, id="fixed-id")
        await producer.flush()
    assert one == "fixed-id"
    n = 121 if wire_format == "json" else 4
    ours = await _read(bootstrap, topic, {m.encode() for m in models}, n)
    assert len(ours) == n
    for m in models:
        mine = [r for r in ours if r.key.decode() == m]
        values = [v for r in mine for v in _events(r)]
        assert all(v["model"] == m for v in values)
        assert len({r.partition for r in mine}) == 1  # key = model id: one partition
        labelled = [v for v in values if v["y"] is not None]
        assert [v["id"] for v in labelled] == sent[m]  # order kept within the partition
        assert [v["y"] for v in labelled] == pytest.approx((frame[0] * 2.0).tolist())
        assert [v["x"] for v in labelled] == frame.to_numpy().tolist()
    unlabelled = [v for r in ours for v in _events(r) if v["id"] == "fixed-id"]
    assert unlabelled[0]["y"] is None


async def test_a_model_with_a_home_partition_is_produced_there(make_settings: Any) -> None:
    settings = make_settings()
    bootstrap, topic = settings.kafka_bootstrap, settings.events_topic
    model = f"home-{uuid.uuid4().hex[:6]}"
    async with EventProducer(bootstrap, topic=topic) as hashed:
        await hashed.send(model, [1.0], 1.0, id="by-hash")
    by_hash = (await _read(bootstrap, topic, {model.encode()}, 1))[0].partition
    home = (by_hash + 1) % settings.partitions  # not where its key hashes to
    async with EventProducer(bootstrap, topic=topic, partitions={model: home}) as producer:
        await producer.send_many(model, np.eye(2)[:, :1], [1.0, 2.0])  # one frame
    records = await _read(bootstrap, topic, {model.encode()}, 2)
    assert [r.partition for r in records if is_frame(r.value)] == [home]
