"""Helpers for the API contract tests: read the events topic, write checkpoints like a
worker does (through ``service.store.checkpoints``), talk to Redis directly."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, TopicPartition
from fastapi.testclient import TestClient
from redis.asyncio import Redis

import learners
from clients.batch_answer import parse_prediction_id
from service.api import create_app
from service.config import Settings
from service.store import registry
from service.store.checkpoints import CheckpointWrite, Counters, Stamp, write_checkpoints
from service.store.keys import Keys
from tests._frames import record_events
from tests._procs import terminate


def events_for(
    settings: Settings, model: str, until: Callable[[list[dict[str, Any]]], bool], timeout=20.0
) -> list[dict[str, Any]]:
    """Every event keyed ``model`` on the events topic (its creation marker left out), read
    from the start until ``until`` holds (or ``timeout`` seconds of polling ran out)."""

    async def run() -> list[dict[str, Any]]:
        consumer = AIOKafkaConsumer(**settings.kafka_options(), enable_auto_commit=False)
        await consumer.start()
        try:
            parts = await consumer._client._wait_on_metadata(settings.events_topic)  # noqa: SLF001
            tps = [TopicPartition(settings.events_topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            found: list[dict[str, Any]] = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while loop.time() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for r in records:
                        for event in record_events(r.value):
                            if r.key == model.encode() and event.get("type") != "created":
                                found.append(event | {"_partition": r.partition})
                if until(found):
                    break
            return found
        finally:
            await consumer.stop()

    return asyncio.run(run())


async def _with_redis(settings: Settings, fn: Callable[[Redis, Keys], Any]) -> Any:
    redis = Redis.from_url(settings.redis_url)
    try:
        return await fn(redis, Keys(settings.key_prefix))
    finally:
        await redis.aclose()


def redis_call(settings: Settings, fn: Callable[[Redis, Keys], Any]) -> Any:
    return asyncio.run(_with_redis(settings, fn))


def record_of(keys: Keys, model: str, prediction_id: str) -> tuple[str, int]:
    """The Redis record holding a prediction (``<batch>.<row>``) and its row in it."""
    parsed = parse_prediction_id(prediction_id)
    assert parsed is not None, f"{prediction_id!r} is not <batch>.<row>"
    return keys.predictions(model, parsed[0]), parsed[1]


def write_state(
    settings: Settings,
    model: str,
    learner: learners.Learner,
    expected_version: int,
    offset: int,
    applied: int = 0,
    stats: bytes = b"",
    figures: bytes = b"",
    token: str = "",
) -> int:
    """Checkpoint ``learner`` as the worker would (``figures`` empty: as a worker from
    before the ``figures`` field did; ``token``: the write's token, none by default, so
    the next write needs none either); returns the new version."""
    write = CheckpointWrite(
        model=model,
        topic=settings.events_topic,
        stamp=Stamp(0, offset, f"e{offset}"),
        state=learners.encode_state(learner.state()),
        counters=Counters(applied=applied),
        expected_version=expected_version,
        stats=stats,
        figures=figures,
        token=token,
    )

    async def go(redis: Redis, keys: Keys) -> int:
        spec = await registry.get_spec(redis, keys, model) or {}
        home = registry.home_partition(spec) or 0  # the worker writes its own incarnation
        w = replace(
            write,
            incarnation=spec.get("incarnation", ""),
            stamp=replace(write.stamp, partition=home),
        )
        (result,) = await write_checkpoints(redis, keys, [w])
        assert result.outcome == "ok", result
        return result.version

    return redis_call(settings, go)


def pa_with_weights(w: list[float]) -> learners.Learner:
    learner = learners.build("pa", len(w))
    learner.w_ = np.asarray(w, dtype=np.float64)  # type: ignore[attr-defined]
    return learner


@contextlib.contextmanager
def api_and_worker(settings: Settings) -> Iterator[TestClient]:
    """The API in process and one worker subprocess, both on ``settings``; the worker is
    stopped on the way out."""
    code = (
        "from service.config import Settings; from service.worker.main import main;"
        " main(Settings())"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], env=settings.child_environment())
    try:
        with TestClient(create_app(settings)) as client:
            yield client
    finally:
        terminate(worker, 20)
