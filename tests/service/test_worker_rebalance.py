"""Rebalance and Redis outage mid-stream: nothing lost, nothing doubled."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path

import pytest
import redis as redis_lib

from learners.codec import encode_state
from service.embedded import start_redis
from service.store.checkpoints import ids_sum
from service.store.keys import Keys
from tests._wait import wait_for
from tests.service.conftest import FAST, WorkerProcess, make_event, produce, read_topic, replay, run

pytestmark = [pytest.mark.service, pytest.mark.slow]

SPECS = {
    f"rb-{i}": {"id": f"rb-{i}", "kind": "pa", "dim": 3, "params": {"C": 0.5}} for i in range(6)
}
WAIT_S = 120.0  # bounds a hang only


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        m = f"rb-{rng.randrange(len(SPECS))}"
        x = [rng.gauss(0, 1) for _ in range(3)]
        out.append(make_event(m, f"{seed}-{i}", x, x[0] - 2 * x[2] + rng.gauss(0, 0.1)))
        if i % 50 == 49:
            out.append(dict(out[rng.randrange(len(out))]))  # a re-sent id
    return out


def _register(r: redis_lib.Redis, keys: Keys) -> None:
    for spec in SPECS.values():
        r.set(keys.spec(spec["id"]), json.dumps(spec))
        r.sadd(keys.models(), spec["id"])


def _handled(r: redis_lib.Redis, keys: Keys) -> int:
    total = 0
    for m in SPECS:
        try:
            vals = r.hmget(keys.state(m), "applied", "duplicate")
        except redis_lib.ConnectionError:
            return -1
        total += sum(int(v) for v in vals if v is not None)
    return total


def _feed(
    st, events: list[dict], chunk: int, pause: float, sent: list[int] | None = None
) -> threading.Thread:  # type: ignore[no-untyped-def]
    """Produce ``events`` in chunks, ``pause`` s apart, in a thread (``sent``: the number
    produced, appended after each chunk)."""

    async def go() -> None:
        for i in range(0, len(events), chunk):
            await produce(st, events[i : i + chunk])
            if sent is not None:
                sent.append(i + chunk)
            await asyncio.sleep(pause)

    t = threading.Thread(target=asyncio.run, args=(go(),), daemon=True)
    t.start()
    return t


def _wait(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    wait_for(pred, WAIT_S, what, interval=0.1)


def _assert_exact(st, r: redis_lib.Redis, keys: Keys) -> None:  # type: ignore[no-untyped-def]
    ref = replay(SPECS, run(read_topic(st, st.events_topic)))
    for m, expect in ref.items():
        h = r.hgetall(keys.state(m))
        assert h[b"state"] == encode_state(expect.learner.state()), f"{m}: state differs"
        assert int(h[b"applied"]) == len(expect.applied_ids)
        assert int(h[b"ids_sum"]) == ids_sum(expect.applied_ids)
        assert int(h[b"duplicate"]) == expect.duplicates


def test_second_worker_joins_and_leaves_mid_stream(make_settings, redis_url, tmp_path: Path):
    st = make_settings(**FAST)
    r, keys = redis_lib.Redis.from_url(redis_url), Keys(st.key_prefix)
    _register(r, keys)
    events = _events(6000, seed=21)
    first = WorkerProcess(st, "a", tmp_path)
    second = WorkerProcess(st, "b", tmp_path)
    first.start()
    feeder = _feed(st, events, chunk=100, pause=0.3)  # ~20 s of steady traffic
    try:
        _wait(lambda: _handled(r, keys) >= 1000, "the first worker to make progress")
        second.start()  # joins mid-stream: partitions are split
        _wait(
            lambda: (
                r.exists(keys.worker("b-0")) and int(r.hget(keys.worker("b-0"), "applied") or 0) > 0
            ),
            "the second worker to apply events",
        )
        assert second.stop() == 0  # leaves mid-stream, gracefully
        feeder.join(60)
        _wait(lambda: _handled(r, keys) == len(events), "every event to be handled")
        assert first.stop() == 0
    finally:
        first.kill()
        second.kill()
    _assert_exact(st, r, keys)
    a_stats = r.hgetall(keys.worker("a-0"))
    assert int(a_stats[b"applied"]) > 0


def test_worker_waits_out_a_redis_restart(make_settings, tmp_path: Path) -> None:
    data = tmp_path / "redis"
    data.mkdir()
    server = start_redis(data_dir=str(data), persist=True)
    port = server.port
    st = make_settings(**{**FAST, "redis_url": server.url, "redis_retry_max_s": 0.5})
    r, keys = redis_lib.Redis.from_url(server.url), Keys(st.key_prefix)
    _register(r, keys)
    events = _events(3000, seed=22)
    worker = WorkerProcess(st, "w", tmp_path)
    worker.start()
    sent: list[int] = []
    feeder = _feed(st, events, chunk=300, pause=0.3, sent=sent)
    try:
        _wait(lambda: _handled(r, keys) >= 800, "progress before the outage")
        server.kill()  # Redis crashes mid-stream
        # the worker meets the dead Redis, and events keep arriving while it is down
        more = min(len(sent) + 2, -(-len(events) // 300))  # (unless the feed has ended)
        _wait(
            lambda: "Redis unavailable" in worker.log_text() and len(sent) >= more,
            "the worker to retry a dead Redis while two more chunks arrive",
        )
        assert worker.alive()
        server = start_redis(port=port, data_dir=str(data), persist=True)
        feeder.join(60)
        _wait(lambda: _handled(r, keys) == len(events), "every event after the restart")
        assert worker.alive()
        assert worker.stop() == 0
    finally:
        worker.kill()
        r.close()
    r = redis_lib.Redis.from_url(server.url)
    try:
        _assert_exact(st, r, keys)
        assert int(r.hget(keys.worker("w-0"), "redis_retries")) > 0
        assert "Redis unavailable" in worker.log_text()
    finally:
        r.close()
        server.stop()
