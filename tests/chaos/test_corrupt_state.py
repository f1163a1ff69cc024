"""A corrupt or truncated state blob in Redis is detected (the codec envelope's CRC-32) and
reported, never loaded: neither by a worker (the model is not loaded, its stored blob is
left as it is for the operator, its events go to the dead-letter topic with the reason,
other models keep learning) nor by the API (a readable error, logged; no prediction from
garbage)."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest
import redis as redis_lib
from fastapi.testclient import TestClient

import learners
from learners.codec import encode_state
from service.api import create_app
from service.store.keys import Keys
from service.worker.loop import run_worker
from tests.service._api_helpers import pa_with_weights, write_state
from tests.service.conftest import FAST, make_event, produce, read_topic

pytestmark = [pytest.mark.service]

SPECS = {m: {"id": m, "kind": "pa", "dim": 2, "params": {}} for m in ("cs-bad", "cs-good")}


def corrupt(blob: bytes, how: str) -> bytes:
    if how == "flipped-byte":
        i = len(blob) - 3  # inside the array payload: only the checksum can notice
        return blob[:i] + bytes([blob[i] ^ 0x40]) + blob[i + 1 :]
    return blob[: len(blob) - 7]  # truncated


def _events(model: str, start: int, n: int) -> list[dict]:
    return [
        make_event(model, f"{model}-{i}", [i % 3, 1.0], float(i % 5))
        for i in range(start, start + n)
    ]


async def _run(st, done, wid: str) -> None:  # type: ignore[no-untyped-def]
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(st, stop=stop, worker_id=wid))
    try:
        async with asyncio.timeout(60):
            while not done():
                assert not task.done(), task.result()
                await asyncio.sleep(0.1)
    finally:
        stop.set()
        await task  # stops cleanly: a worker never dies of a bad checkpoint


@pytest.mark.parametrize("how", ["flipped-byte"])  # truncation: the API test and codec tests
async def test_worker_reports_and_does_not_load_a_corrupt_state(
    make_settings, redis_url, how, caplog
) -> None:  # type: ignore[no-untyped-def]
    st = make_settings(**FAST)
    r, keys = redis_lib.Redis.from_url(redis_url), Keys(st.key_prefix)
    for spec in SPECS.values():
        r.set(keys.spec(spec["id"]), json.dumps(spec))
        r.sadd(keys.models(), spec["id"])

    def applied(m: str) -> int:
        return int(r.hget(keys.state(m), "applied") or 0)

    await produce(st, _events("cs-bad", 0, 30) + _events("cs-good", 0, 30))
    await _run(st, lambda: applied("cs-bad") == 30 and applied("cs-good") == 30, "a")

    good_blob = r.hget(keys.state("cs-bad"), "state")
    r.hset(keys.state("cs-bad"), "state", corrupt(good_blob, how))
    before = r.hgetall(keys.state("cs-bad"))
    await produce(st, _events("cs-bad", 30, 10) + _events("cs-good", 30, 10))
    caplog.set_level(logging.ERROR)

    def settled() -> bool:
        letters = int(r.get(keys.deadletter_count()) or 0)
        return applied("cs-good") == 40 and letters >= 10

    await _run(st, settled, "b")
    letters = await read_topic(st, st.deadletter_topic)
    assert r.hgetall(keys.state("cs-bad")) == before  # not loaded, not overwritten
    reasons = {json.loads(v)["reason"] for _, _, _, v in letters}
    assert all("checksum mismatch" in why and "cs-bad" in why for why in reasons), reasons
    assert "checksum mismatch" in caplog.text and "cs-bad" in caplog.text
    # the healthy model on the same worker went on learning
    ref = learners.build("pa", 2)
    for ev in _events("cs-good", 0, 40):
        ref.learn(ev["x"], ev["y"])
    assert r.hget(keys.state("cs-good"), "state") == encode_state(ref.state())
    r.close()


@pytest.mark.parametrize("how", ["flipped-byte", "truncated"])
def test_api_reports_and_does_not_load_a_corrupt_state(make_settings, how, caplog) -> None:  # type: ignore[no-untyped-def]
    st = make_settings()
    mid = f"cs-api-{uuid.uuid4().hex[:6]}"
    r, keys = redis_lib.Redis.from_url(st.redis_url), Keys(st.key_prefix)
    with TestClient(create_app(st), raise_server_exceptions=False) as api:
        assert api.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        write_state(st, mid, pa_with_weights([1.0, 2.0]), expected_version=0, offset=0)
        ok = api.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 1.0]})
        assert ok.status_code == 200 and ok.json()["predictions"][0]["value"] == 3.0
        blob = r.hget(keys.state(mid), "state")
        r.hset(keys.state(mid), mapping={"state": corrupt(blob, how)})
        r.hincrby(keys.state(mid), "version", 1)  # a new checkpoint: the cache must reload
        caplog.set_level(logging.ERROR)
        bad = api.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 1.0]})
        assert bad.status_code == 500, bad.text  # a server-side fault, reported as such
        assert "cannot be read" in bad.json()["detail"] and mid in bad.json()["detail"]
        assert "checksum mismatch" in caplog.text
        # the rest of the API is unaffected
        assert api.get(f"/v1/models/{mid}").status_code == 200
        assert api.get("/readyz").status_code == 200
    r.close()
