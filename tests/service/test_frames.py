"""Binary frames end to end (docs/events.md §6), on a real broker and Redis: what a frame
teaches a model is bit for bit what the same events as JSON teach it; a bad row is
dead-lettered alone with its reason as a JSON event; a re-sent frame is learned once; the
API's events route produces one frame per batch."""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis

from clients import wire
from clients.producer import EventProducer
from service.store import registry
from service.store.checkpoints import StoredState, read_state
from service.store.keys import Keys
from tests.service.conftest import produce, read_topic, replay, run_worker_until

pytestmark = pytest.mark.service

KINDS = {
    "pa": {"kind": "pa", "dim": 4, "params": {"C": 0.5}},
    "cls": {"kind": "pa-classifier", "dim": 3, "params": {}},
    "dvaw": {"kind": "dvaw", "dim": 3, "params": {}},
}


async def _create(r: Redis, keys: Keys, specs: dict[str, dict[str, Any]]) -> None:
    for mid, spec in specs.items():
        await registry.create_spec(r, keys, {"id": mid, **spec}, overwrite=True)


async def _run_until(settings: Any, done: Any, timeout: float = 90.0) -> Any:
    return await run_worker_until(settings, done, timeout, worker_id="frames")


def _handled(s: StoredState | None) -> int:
    return 0 if s is None else s.counters.applied + s.counters.duplicate + s.counters.rejected


def _rows(kind: str, n: int, seed: int) -> tuple[np.ndarray, list[Any], list[float | None]]:
    """Seeded rows for a kind: labels (booleans for the classifier; a few unlabelled rows
    the regressors refuse), hints on some rows."""
    rng = random.Random(seed)
    dim = KINDS[kind]["dim"]
    X = np.array([[rng.gauss(0, 1) for _ in range(dim)] for _ in range(n)])
    if kind == "cls":
        y: list[Any] = [bool(X[i, 0] + 0.3 * X[i, 1] > 0) for i in range(n)]
    else:
        y = [float(X[i] @ np.arange(1, dim + 1)) + rng.gauss(0, 0.1) for i in range(n)]
        for i in rng.sample(range(n), 3):
            y[i] = None  # refused by a regressor: dead-lettered the same way in both formats
    hints = [rng.uniform(0, 1) if rng.random() < 0.3 else None for _ in range(n)]
    return X, y, hints


async def test_frames_teach_what_the_same_json_events_teach(worker_settings, redis_url) -> None:
    """Per kind, one model fed JSON records and one fed frames (the SDK's producer), the
    same ids, labels and hints, with a block of ids re-sent: same state and statistics
    bytes, same counters and ids checksum."""
    st = worker_settings
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    specs = {f"{k}-{fmt}": KINDS[k] for k in KINDS for fmt in ("json", "frame")}
    await _create(r, keys, specs)
    n = 450
    async with EventProducer(st.kafka_bootstrap, topic=st.events_topic) as producer:
        for k in KINDS:
            X, y, hints = _rows(k, n, seed=len(k))
            ids = [f"{k}-{i}" for i in range(n)]
            for fmt in ("json", "frame"):
                for a in range(0, n, 100):  # several records; the last re-sends 30 ids
                    await producer.send_many(
                        f"{k}-{fmt}", X[a : a + 100], y[a : a + 100],
                        ids=ids[a : a + 100], hints=hints[a : a + 100], format=fmt,
                    )  # fmt: skip
                await producer.send_many(
                    f"{k}-{fmt}", X[:30], y[:30], ids=ids[:30], hints=hints[:30], format=fmt
                )

    async def done() -> bool:
        return [_handled(await read_state(r, keys, m)) for m in specs] == [n + 30] * len(specs)

    await _run_until(st, done)
    log = await read_topic(st, st.events_topic)
    frames = sum(wire.is_frame(v) for *_, v in log)
    assert frames == 3 * 6 and len(log) == frames + 3 * (n + 30)
    ref = replay({m: {"id": m, **s} for m, s in specs.items()}, log)
    for k in KINDS:
        a = await read_state(r, keys, f"{k}-json")
        b = await read_state(r, keys, f"{k}-frame")
        assert a is not None and b is not None
        assert a.state == b.state and a.stats == b.stats, k
        assert vars(a.counters) == vars(b.counters), k
        assert b.counters.duplicate == 30 and b.counters.applied == len(
            ref[f"{k}-frame"].applied_ids
        )
        assert b.counters.rejected == (0 if k == "cls" else 3)
    await r.aclose()


async def test_bad_rows_are_dead_lettered_alone_and_the_rest_applied(
    worker_settings, redis_url
) -> None:
    st = worker_settings
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    await _create(r, keys, {"fb": KINDS["pa"]})
    X = np.ones((5, 4))
    X[1, 2] = np.nan
    X[3, 0] = 1e200
    mixed = wire.encode_frame("fb", [f"r{i}" for i in range(5)], X, [1.0, 2.0, 3.0, 4.0, 5.0])
    wide = wire.encode_frame("fb", ["w0", "w1"], np.ones((2, 5)), [1.0, 1.0])
    cut = wire.encode_frame("fb", ["c0"], np.ones((1, 4)), [1.0])[:-3]
    good = wire.encode_frame("fb", ["g0"], np.ones((1, 4)), [2.0])
    await produce(st, [(b"fb", v) for v in (mixed, wide, cut, good)], raw=True)

    async def done() -> bool:
        return _handled(await read_state(r, keys, "fb")) == 9

    await _run_until(st, done)
    s = await read_state(r, keys, "fb")
    assert s is not None
    assert (s.counters.applied, s.counters.rejected, s.counters.duplicate) == (4, 5, 0)
    letters = [json.loads(v) for *_, v in await read_topic(st, st.deadletter_topic)]
    rows = {json.loads(x["value"])["id"]: x for x in letters if "frame_row" in x}
    assert sorted(rows) == ["r1", "r3", "w0", "w1"]
    assert "finite" in rows["r1"]["reason"] and rows["r1"]["frame_row"] == 1
    assert "1e+150" in rows["r3"]["reason"]
    assert "dimension 4" in rows["w0"]["reason"]
    resend = json.loads(rows["r3"]["value"])  # the row as a JSON event, ready to fix/re-send
    assert resend["model"] == "fb" and resend["x"][0] == 1e200 and resend["y"] == 4.0
    [whole] = [x for x in letters if "frame_row" not in x]
    assert "invalid frame" in whole["reason"] and base64.b64decode(whole["value_base64"]) == cut
    await r.aclose()


async def test_a_re_sent_frame_is_learned_once(worker_settings, redis_url) -> None:
    st = worker_settings
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    await _create(r, keys, {"fd": KINDS["pa"]})
    X = np.random.default_rng(3).standard_normal((50, 4))
    value = wire.encode_frame("fd", [f"d{i}" for i in range(50)], X, X[:, 0].tolist())
    await produce(st, [(b"fd", value), (b"fd", value)], raw=True)

    async def done() -> bool:
        return _handled(await read_state(r, keys, "fd")) == 100

    await _run_until(st, done)
    s = await read_state(r, keys, "fd")
    assert s is not None and (s.counters.applied, s.counters.duplicate) == (50, 50)
    ref = replay({"fd": {"id": "fd", **KINDS["pa"]}}, await read_topic(st, st.events_topic))
    from learners.codec import encode_state

    assert s.state == encode_state(ref["fd"].learner.state())
    await r.aclose()


async def test_the_events_route_produces_one_frame_per_batch(make_settings, redis_url) -> None:
    """``POST /v1/models/{id}/events`` with the default ``events_wire_format`` produces one
    frame per request; with "json" one record per event: the models learn the same."""
    from fastapi.testclient import TestClient

    from service.api import create_app

    st = make_settings(commit_interval_s=0.2, commit_every=50)
    r, keys = Redis.from_url(redis_url), Keys(st.key_prefix)
    X, y, hints = _rows("dvaw", 120, seed=9)
    events = [
        {"id": f"a{i}", "x": X[i].tolist(), **({"y": y[i]} if y[i] is not None else {}),
         **({"hint": hints[i]} if hints[i] is not None else {})}
        for i in range(120)
    ]  # fmt: skip
    for fmt in ("frame", "json"):
        app_settings = st.model_copy(update={"events_wire_format": fmt})
        with TestClient(create_app(app_settings)) as client:
            spec = {"id": f"api-{fmt}", **KINDS["dvaw"]}
            assert client.post("/v1/models", json=spec).status_code == 201
            for a in range(0, 120, 40):
                resp = client.post(
                    f"/v1/models/api-{fmt}/events", json={"events": events[a : a + 40]}
                )
                assert resp.status_code == 202, resp.text

    async def done() -> bool:
        return [_handled(await read_state(r, keys, f"api-{f}")) for f in ("frame", "json")] == [
            120,
            120,
        ]

    await _run_until(st, done)
    log = await read_topic(st, st.events_topic)
    by_model = {m: [v for _, _, k, v in log if k == m.encode()] for m in ("api-frame", "api-json")}
    assert sum(map(wire.is_frame, by_model["api-frame"])) == 3
    assert not any(map(wire.is_frame, by_model["api-json"]))
    a, b = await read_state(r, keys, "api-json"), await read_state(r, keys, "api-frame")
    assert a is not None and b is not None
    assert a.state == b.state and a.stats == b.stats and vars(a.counters) == vars(b.counters)
    assert b.counters.rejected == 3  # the unlabelled rows a regressor refuses
    await r.aclose()


def test_the_events_route_sends_json_when_a_frame_cannot_carry_the_batch() -> None:
    from service.api.routes.events import as_frame
    from service.api.schemas import EventsRequest

    def body(*events: dict[str, Any]) -> tuple[EventsRequest, list[dict[str, Any]]]:
        req = EventsRequest.model_validate({"events": list(events)})
        recs = [wire.example("m", f"e{i}", e.x, e.y, ts=e.ts) for i, e in enumerate(req.events)]
        return req, recs

    dense = as_frame("m", *body({"x": [1.0], "y": 1.0}, {"x": [2.0]}))
    assert dense is not None and wire.is_frame(dense)
    assert as_frame("m", *body({"x": [1.0], "ts": 1.0}, {"x": [2.0], "ts": 2.0})) is None
    assert as_frame("m", *body({"x": [1.0], "y": True}, {"x": [2.0], "y": 1.0})) is None
    assert as_frame("m", *body({"x": [1.0], "y": True}, {"x": [2.0], "y": False})) is not None
