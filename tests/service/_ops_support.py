"""Helpers for tests/service/test_exactly_once_ops.py: producing with the records' places
known, waiting on the worker group's committed Kafka offsets, reading a model's checkpoint
and comparing it with the reference replay (``tests.service.conftest.replay``)."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
from typing import Any

import redis as redis_lib
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from learners.codec import encode_state
from service.store.checkpoints import ids_sum
from service.store.keys import Keys
from tests.service.conftest import Replayed, make_event, wait_for

WAIT_S = 90.0  # bounds a hang only

Record = tuple[int, int, bytes, bytes]  # (partition, offset, key, value), as read_topic gives


def examples(model: str, dim: int, n: int, seed: int, tag: str) -> list[dict[str, Any]]:
    """``n`` seeded regression examples for ``model``, ids ``{tag}-{i}``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        x = [rng.gauss(0, 1) for _ in range(dim)]
        y = sum((k + 1) * v for k, v in enumerate(x)) + rng.gauss(0, 0.1)
        out.append(make_event(model, f"{tag}-{i}", x, y))
    return out


async def produce_at(
    settings: Any, events: list[dict[str, Any]], partition: int | None = None
) -> list[Record]:
    """Produce ``events`` keyed by model (to ``partition`` when given, else where the key
    hashes) and return each as the log now holds it, with its partition and offset."""
    producer = AIOKafkaProducer(linger_ms=5, **settings.kafka_options())
    await producer.start()
    try:
        sent = []
        for ev in events:
            key, value = ev["model"].encode(), json.dumps(ev).encode()
            fut = await producer.send(settings.events_topic, value, key=key, partition=partition)
            sent.append((key, value, fut))
        await producer.flush()
        out = []
        for key, value, fut in sent:
            meta = await fut
            out.append((meta.partition, meta.offset, key, value))
        return out
    finally:
        await producer.stop()


class ExactlyOnceBroken(AssertionError):
    """The model's checkpoint is not the exact reference (its own type, so a broken
    guarantee reads apart from a hang or a broken step of the test)."""


def assert_exact(problems: list[str]) -> None:
    if problems:
        raise ExactlyOnceBroken("; ".join(problems))


async def recreate_topic(settings: Any) -> None:
    """Delete the events topic and create it again at once: its log starts at offset 0
    again while the broker, and with it the worker's consumer group, stays up."""
    admin = AIOKafkaAdminClient(**settings.kafka_options())
    await admin.start()
    try:
        await admin.delete_topics([settings.events_topic])
        topic = NewTopic(settings.events_topic, settings.partitions, settings.topic_replication)
        await admin.create_topics([topic])
    finally:
        await admin.close()


def committed(settings: Any) -> dict[int, int]:
    """The worker group's committed offset per partition of the events topic (absent:
    none). A worker commits only after the checkpoint covering those records is in Redis."""

    async def go() -> dict[int, int]:
        admin = AIOKafkaAdminClient(**settings.kafka_options())
        await admin.start()
        try:
            tps = [TopicPartition(settings.events_topic, p) for p in range(settings.partitions)]
            got = await admin.list_consumer_group_offsets(settings.consumer_group, partitions=tps)
        finally:
            await admin.close()
        return {tp.partition: o.offset for tp, o in got.items() if o.offset >= 0}

    return asyncio.run(go())


def wait_committed(settings: Any, ends: dict[int, int], what: str) -> None:
    """Wait until the group committed at least ``ends[p]`` on each partition ``p``: every
    record below it was handled (in offset order) and checkpointed."""

    def done() -> bool:
        try:
            got = committed(settings)
        except Exception:  # the broker is (re)starting: ask again
            return False
        return all(got.get(p, -1) >= end for p, end in ends.items())

    wait_for(done, WAIT_S, what, interval=0.3)


def ends_of(*logs: list[Record]) -> dict[int, int]:
    """Per partition, the offset after the last record of ``logs``."""
    out: dict[int, int] = {}
    for log in logs:
        for p, o, _, _ in log:
            out[p] = max(out.get(p, 0), o + 1)
    return out


def worker_metric(port: int, prefix: str) -> dict[str, float]:
    """A worker's live samples whose line starts with ``prefix`` (its ``/metrics``), by
    their first label's value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            label, value = line.split("} ")
            out[label.split('"')[1]] = float(value)
    return out


def worker_records(port: int) -> dict[str, float]:
    """A worker's live record counters by outcome."""
    return worker_metric(port, 'onlinepredict_worker_records_total{outcome="')


def register(r: redis_lib.Redis, keys: Keys, spec: dict[str, Any]) -> None:
    """Create a model the way service.store.registry.create_spec does (spec + models set)."""
    r.set(keys.spec(spec["id"]), json.dumps(spec))
    r.sadd(keys.models(), spec["id"])


def mismatches(r: redis_lib.Redis, keys: Keys, model: str, ref: Replayed) -> list[str]:
    """How the stored checkpoint of ``model`` differs from the reference (empty: exact)."""
    h = r.hgetall(keys.state(model))
    if not h:
        return [f"{model}: no checkpoint; expected {len(ref.applied_ids)} applied"]
    out = []
    applied, expected = int(h[b"applied"]), len(ref.applied_ids)
    if applied != expected:
        out.append(f"{model}: {applied} applied for {expected} distinct valid ids")
    if int(h[b"ids_sum"]) != ids_sum(ref.applied_ids):
        out.append(f"{model}: ids_sum differs (not each id exactly once)")
    if h[b"state"] != encode_state(ref.learner.state()):
        out.append(f"{model}: state differs from the clean replay")
    return out
