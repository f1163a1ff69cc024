"""The worker against a real broker and Redis: learning matches an in-process replay bit
for bit, duplicates are dropped, invalid events are dead-lettered, stamps of a reset log
are voided."""

from __future__ import annotations

import asyncio
import json
import math
import random

import pytest
from redis.asyncio import Redis

from learners.codec import decode_state, encode_state
from service.embedded import free_port, start_broker
from service.embedded.topics import ensure_topics
from service.metrics import figures
from service.metrics.running import RunningStats
from service.store import registry
from service.store.checkpoints import ids_sum, read_seen, read_state
from service.store.keys import Keys
from tests.service.conftest import make_event, produce, read_topic, replay, run_worker_until

pytestmark = pytest.mark.service

SPECS = {
    "m-a": {"id": "m-a", "kind": "pa", "dim": 4, "params": {}},
    "m-b": {"id": "m-b", "kind": "pa", "dim": 4, "params": {"C": 0.1}},
    "m-c": {"id": "m-c", "kind": "pa", "dim": 2, "params": {}},
}


def stream(n: int, seed: int, dup_every: int = 0, prefix: str = "e") -> list[dict]:
    """Seeded events over SPECS' models; every ``dup_every``-th event re-sends an earlier
    id of the same model (same payload), sometimes right after it (same batch)."""
    rng = random.Random(seed)
    models = sorted(SPECS)
    out: list[dict] = []
    by_model: dict[str, list[dict]] = {m: [] for m in models}
    for i in range(n):
        if dup_every and i % dup_every == dup_every - 1 and out:
            src = rng.choice(out[-3:] if rng.random() < 0.5 else out)
            out.append(dict(src))
            continue
        m = models[rng.randrange(len(models))]
        dim = SPECS[m]["dim"]
        x = [round(rng.gauss(0, 1), 6) for _ in range(dim)]
        y = sum((k + 1) * v for k, v in enumerate(x)) + rng.gauss(0, 0.1)
        ev = make_event(m, f"{prefix}{i}", x, y)
        if rng.random() < 0.1:
            ev["hint"] = 0.5
        out.append(ev)
        by_model[m].append(ev)
    return out


async def _create_specs(r: Redis, keys: Keys) -> None:
    for spec in SPECS.values():
        await registry.create_spec(r, keys, spec, overwrite=True)


async def _applied_total(r: Redis, keys: Keys) -> int:
    total = 0
    for m in SPECS:
        s = await read_state(r, keys, m)
        if s is not None:
            c = s.counters
            total += c.applied + c.duplicate + c.rejected
    return total


async def _assert_matches_replay(r: Redis, keys: Keys, settings) -> None:  # type: ignore[no-untyped-def]
    log = await read_topic(settings, settings.events_topic)
    ref = replay(SPECS, log)
    for m, expected in ref.items():
        s = await read_state(r, keys, m)
        assert s is not None, m
        assert s.state == encode_state(expected.learner.state()), f"{m}: state differs"
        assert s.counters.applied == len(expected.applied_ids)
        assert s.counters.duplicate == expected.duplicates
        assert s.counters.ids_sum == ids_sum(expected.applied_ids)


async def test_worker_matches_replay_and_drops_duplicates(worker_settings, redis_url) -> None:
    st = worker_settings
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    await _create_specs(r, keys)
    events = stream(1500, seed=1, dup_every=15)
    await produce(st, events)
    ctx = await run_worker_until(st, lambda: _count_is(r, keys, len(events)))
    await _assert_matches_replay(r, keys, st)
    assert ctx.stats.duplicate == 100 and ctx.stats.applied == 1400
    # the final (shutdown) checkpoint covers each model's last event, and seen ids persist
    last = {e["model"]: e["id"] for e in events}
    for m in SPECS:
        s = await read_state(r, keys, m)
        assert s.stamp.event_id == last[m]
        assert len(await read_seen(r, keys, m, 10_000)) == s.counters.applied
        # the figures readers get were computed at this write, from these statistics
        carried = figures.decode(await r.hget(keys.state(m), "figures"))
        assert (
            s.stats is not None
            and carried.figures == RunningStats.from_state(decode_state(s.stats)).figures()
        )
    await r.aclose()


async def _count_is(r: Redis, keys: Keys, n: int) -> bool:
    return await _applied_total(r, keys) >= n


async def test_invalid_events_are_dead_lettered_with_reasons(worker_settings, redis_url) -> None:
    st = worker_settings
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    await _create_specs(r, keys)
    good = make_event("m-a", "ok-1", [1.0, 2.0, 3.0, 4.0], 1.0)
    bad = [
        (b"m-a", b"{not json"),
        (b"m-a", json.dumps({"model": "m-a", "x": [1, 2, 3, 4], "y": 1}).encode()),
        (b"m-a", json.dumps(make_event("m-a", "dim", [1.0, 2.0], 1.0)).encode()),
        (b"m-a", b'{"model": "m-a", "id": "nan", "x": [NaN, 1, 2, 3], "y": 1}'),
        (b"m-a", json.dumps(make_event("m-a", "ystr", [1, 2, 3, 4], "one")).encode()),
        (b"ghost", json.dumps(make_event("ghost", "g1", [1.0], 1.0)).encode()),
        (b"m-b", json.dumps(make_event("m-a", "key", [1, 2, 3, 4], 1.0)).encode()),
        (b"m-a", json.dumps(make_event("m-a", "noy", [1, 2, 3, 4], None)).encode()),
    ]
    await produce(st, [*bad, (b"m-a", json.dumps(good).encode())], raw=True)

    async def done() -> bool:
        s = await read_state(r, keys, "m-a")
        return s is not None and s.counters.applied == 1

    ctx = await run_worker_until(st, done)
    letters = [json.loads(v) for _, _, _, v in await read_topic(st, st.deadletter_topic)]
    reasons = {
        json.loads(x["value"]).get("id", "") if x["value"].startswith('{"') else "raw": x["reason"]
        for x in letters
    }
    assert len(letters) == len(bad), [
        (x["partition"], x["offset"], x["reason"][:30]) for x in letters
    ][3:]
    assert "not valid JSON" in reasons["raw"]
    assert "'id'" in reasons[""]
    assert "dimension 4" in reasons["dim"]
    assert "finite" in reasons["nan"]
    assert "'y'" in reasons["ystr"]
    assert "unknown model 'ghost'" in reasons["g1"]
    assert "record key 'm-b'" in reasons["key"]
    assert "y must be a real number" in reasons["noy"]
    assert all(x["topic"] == st.events_topic and "offset" in x for x in letters)
    s = await read_state(r, keys, "m-a")
    assert s.counters.applied == 1 and s.stamp.event_id == "ok-1"
    assert s.counters.rejected == 5  # the ones that sit on m-a's partition and name m-a
    assert ctx.stats.deadletter == len(bad)
    assert int(await r.get(keys.deadletter_count())) == len(bad)  # the API's /metrics reads it
    await r.aclose()


def _fresh_broker_settings(st, port: int):  # type: ignore[no-untyped-def]
    return st.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{port}"})


async def test_stamp_of_a_reset_log_is_void_and_model_relearns(make_settings, redis_url) -> None:
    """The memory-only broker restarts: offsets start at 0 again. The model keeps its
    state and learns the new log instead of skipping it."""
    port = free_port()
    broker = start_broker(port=port)
    try:
        st = make_settings(kafka_bootstrap=broker.url, commit_every=50, commit_interval_s=0.3)
        r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
        await _create_specs(r, keys)
        first = [e for e in stream(300, seed=2) if e["model"] == "m-a"][:60]
        await produce(st, first)
        await run_worker_until(st, lambda: _model_applied(r, keys, "m-a", 60))
        before = await read_state(r, keys, "m-a")
        assert before.stamp.offset == 59
    finally:
        broker.stop()
    broker = start_broker(port=port)  # same address, empty log
    try:
        await ensure_topics(st)
        second = [e for e in stream(300, seed=3, prefix="n") if e["model"] == "m-a"][:20]
        await produce(st, second)
        await run_worker_until(st, lambda: _model_applied(r, keys, "m-a", 80))
        after = await read_state(r, keys, "m-a")
        assert after.counters.applied == 80
        assert after.stamp.offset == 19 and after.stamp.event_id == second[-1]["id"]
        ref = replay(
            SPECS, [(0, i, None, json.dumps(e).encode()) for i, e in enumerate(first + second)]
        )
        assert after.state == encode_state(ref["m-a"].learner.state())
    finally:
        broker.stop()
        await r.aclose()


async def _model_applied(r: Redis, keys: Keys, model: str, n: int) -> bool:
    s = await read_state(r, keys, model)
    return s is not None and s.counters.applied >= n


def test_finite_json_guard() -> None:
    assert not math.isfinite(json.loads("NaN"))  # why the worker checks finiteness itself


async def test_worker_health_and_metrics_endpoint(make_settings, redis_url) -> None:
    port = free_port()
    st = make_settings(worker_metrics_port=port, commit_interval_s=0.2)
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    await _create_specs(r, keys)
    await produce(st, stream(30, seed=9))

    async def get(path: str) -> tuple[str, str]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        raw = (await reader.read()).decode()
        writer.close()
        head, _, body = raw.partition("\r\n\r\n")
        return head.split("\r\n")[0], body

    seen: dict[str, tuple[str, str]] = {}

    async def done() -> bool:
        if await _applied_total(r, keys) < 30:
            return False
        seen["health"] = await get("/healthz")
        seen["metrics"] = await get("/metrics")
        seen["some"] = await get("/metrics?name[]=onlinepredict_worker_records_total")
        return True

    await run_worker_until(st, done)
    assert seen["health"][0].endswith("200 OK")
    status, body = seen["metrics"]
    assert status.endswith("200 OK")
    assert 'onlinepredict_worker_records_total{outcome="applied"} 30.0' in body
    assert "onlinepredict_dedupe_horizon_events{" in body
    status, some = seen["some"]  # prometheus_client's name[] convention: those samples only
    samples = [line for line in some.splitlines() if not line.startswith("#")]
    assert status.endswith("200 OK") and len(samples) == 5  # the five outcomes
    assert 'onlinepredict_worker_records_total{outcome="applied"} 30.0' in samples
    await r.aclose()


async def test_register_control_events_are_applied_in_log_order(make_settings, redis_url) -> None:
    """docs/events.md §3: a transductive block registered before its labels."""
    import learners

    if "transductive" not in learners.REGISTRY:
        pytest.skip("the transductive learner is not installed")
    st = make_settings(commit_interval_s=0.2)
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    specs = {
        "tr": {"id": "tr", "kind": "transductive", "dim": 2, "params": {}},
        "plain": {"id": "plain", "kind": "pa", "dim": 2, "params": {}},
    }
    for spec in specs.values():
        await registry.create_spec(r, keys, spec)
    block = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    events = [
        {"model": "tr", "id": "b1", "type": "register", "vectors": block},
        *[make_event("tr", f"t{i}", row, float(sum(row))) for i, row in enumerate(block)],
        {"model": "tr", "id": "b1", "type": "register", "vectors": block},  # re-sent: dropped
        {"model": "plain", "id": "p1", "type": "register", "vectors": block},
        {"model": "tr", "id": "bad", "type": "nonsense"},
    ]
    await produce(st, events)

    async def done() -> bool:
        a = await read_state(r, keys, "tr")
        b = await read_state(r, keys, "plain")
        return (
            a is not None
            and b is not None
            and a.counters.applied + a.counters.duplicate + a.counters.rejected == 6
        )

    await run_worker_until(st, done)
    log = await read_topic(st, st.events_topic)
    ref = replay(specs, log)
    tr = await read_state(r, keys, "tr")
    assert tr.state == encode_state(ref["tr"].learner.state())
    assert (tr.counters.applied, tr.counters.duplicate, tr.counters.rejected) == (4, 1, 1)
    letters = [json.loads(v) for _, _, _, v in await read_topic(st, st.deadletter_topic)]
    reasons = sorted(x["reason"] for x in letters)
    assert len(reasons) == 2
    assert "does not take block registration" in reasons[0]
    assert "unknown event type 'nonsense'" in reasons[1]
    await r.aclose()
