"""``up --demo`` resumes where it stopped (issue 34): every ``up`` used to feed the panel's
first rows into the same model again. Real broker, Redis and worker."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from service.embedded.demo import MODEL_ID, resume_position, run_demo
from service.store.checkpoints import read_state
from service.store.connect import redis_client
from service.store.keys import Keys
from tests.service.conftest import read_topic, run, run_worker_until

FIRST, SECOND = 40, 10


@pytest.mark.service
def test_a_second_demo_feed_starts_after_the_rows_the_model_learned(make_settings: Any) -> None:
    pytest.importorskip("skfolio")
    settings = make_settings(commit_interval_s=0.2)
    keys = Keys(settings.key_prefix)

    async def applied() -> int:
        redis = redis_client(settings)
        try:
            stored = await read_state(redis, keys, MODEL_ID)
            return stored.counters.applied if stored else 0
        finally:
            await redis.aclose()

    async def learned(n: int) -> bool:
        return await applied() == n

    stop = threading.Event()
    assert run(run_demo(settings, stop, rate=2000, limit=FIRST)) == FIRST
    run(run_worker_until(settings, lambda: learned(FIRST)))

    async def position() -> int:
        redis = redis_client(settings)
        try:
            return await resume_position(redis, keys)
        finally:
            await redis.aclose()

    assert run(position()) == FIRST
    assert run(run_demo(settings, stop, rate=2000, limit=SECOND)) == SECOND
    records = run(read_topic(settings, settings.events_topic))
    ids = [json.loads(value)["id"] for _, _, _, value in records if b'"demo-' in value]
    rows = [int(i.rsplit("-", 1)[1]) for i in ids]  # demo-<run>-<epoch>-<row>
    assert rows == [*range(FIRST), *range(FIRST, FIRST + SECOND)], rows
    run(run_worker_until(settings, lambda: learned(FIRST + SECOND)))
