"""Bounded cost (issue 31, item 3): rate limits shared through Redis, the request cost
budget, the concurrency limit, the caps on models and total state. Real Redis and broker
(the session fixtures); the apps in process."""

from __future__ import annotations

import asyncio
import json
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import redis as redis_lib
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Histogram

from clients.wire import PREDICT_CONTENT_TYPE
from service.api import create_app
from service.api.cost import row_cost
from service.api.middleware import LimitsAndTiming
from service.api.ratelimit import parse_rate_limits, scope_of

pytestmark = [pytest.mark.service]

KEYS = "alice:predict+read:alice-secret-1,bob:predict+read:bob-secret-1,ops:admin:ops-secret-1"
ALICE = {"X-API-Key": "alice-secret-1"}
BOB = {"X-API-Key": "bob-secret-1"}
OPS = {"X-API-Key": "ops-secret-1"}


def _binary(X: np.ndarray) -> bytes:
    """docs/events.md §7: '<4sBBHII' header (no hints), then the rows as float64."""
    n, d = X.shape
    return struct.pack("<4sBBHII", b"\x93OPB", 1, 0, 0, n, d) + X.astype("<f8").tobytes()


@pytest.fixture
def two_apps(make_settings) -> Iterator[tuple[TestClient, TestClient, str]]:  # type: ignore[no-untyped-def]
    # one minute windows: no test depends on how fast it runs
    st = make_settings(api_keys=KEYS, rate_limits="predict=5/m,read=100/m")
    with (
        TestClient(create_app(st), raise_server_exceptions=False) as a,
        TestClient(create_app(st), raise_server_exceptions=False) as b,
    ):
        mid = f"rl-{uuid.uuid4().hex[:6]}"
        r = a.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}, headers=OPS)
        assert r.status_code == 201, r.text
        yield a, b, mid


def test_rate_limit_is_per_key_and_shared_by_every_api(two_apps) -> None:  # type: ignore[no-untyped-def]
    a, b, mid = two_apps
    body = {"x": [1.0, 2.0]}
    # five predicts for alice, alternating between the two API processes: all pass
    for i in range(5):
        api = a if i % 2 == 0 else b
        assert api.post(f"/v1/models/{mid}/predict", json=body, headers=ALICE).status_code == 200
    over = b.post(f"/v1/models/{mid}/predict", json=body, headers=ALICE)
    assert over.status_code == 429, over.text
    retry = int(over.headers["Retry-After"])
    assert 1 <= retry <= 60
    assert "'predict' scope" in over.json()["detail"]
    assert a.post(f"/v1/models/{mid}/predict", json=body, headers=ALICE).status_code == 429
    # another key has its own count; another scope of the same key too
    assert a.post(f"/v1/models/{mid}/predict", json=body, headers=BOB).status_code == 200
    assert a.get(f"/v1/models/{mid}", headers=ALICE).status_code == 200
    # the binary body is counted alike (refused before it is read)
    X = np.ones((3, 2))
    r = b.post(
        f"/v1/models/{mid}/predict",
        content=_binary(X),
        headers={**ALICE, "content-type": PREDICT_CONTENT_TYPE},
    )
    assert r.status_code == 429


def test_anonymous_requests_are_limited_per_client_address(make_settings) -> None:  # type: ignore[no-untyped-def]
    st = make_settings(rate_limits="read=3/m")
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        codes = [c.get("/v1/models").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        # a wrong secret is counted as its address, not as a new key
        assert c.get("/v1/models", headers={"X-API-Key": "nope"}).status_code == 429
        assert c.get("/healthz").status_code == 200  # outside /v1: never limited


def test_the_limiter_fails_open_when_redis_is_down(make_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    # nothing listens on port 1: the limiter logs once and lets requests through, which
    # then answer as the route does without Redis (503), never 500 or 429
    st = make_settings(redis_url="redis://127.0.0.1:1/0", rate_limits="read=1/m")
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        codes = [c.get("/v1/models").status_code for _ in range(3)]
    assert codes == [503, 503, 503]
    warnings = [r for r in caplog.records if "rate limiter: Redis unavailable" in r.message]
    assert len(warnings) == 1


def test_rate_limit_settings() -> None:
    default = "read=2000/s,predict=2000/s,ingest=5000/s,admin=100/s"
    assert parse_rate_limits("predict=200/s,ingest=5000/s", default) == {
        "read": "2000/s",
        "predict": "200/s",
        "ingest": "5000/s",
        "admin": "100/s",
    }
    assert parse_rate_limits("off", default) == {}
    assert parse_rate_limits("", default) == {}
    assert "admin" not in parse_rate_limits("admin=off", default)
    with pytest.raises(ValueError, match="scope=N/s"):
        parse_rate_limits("predict=lots")
    assert scope_of("POST", "/v1/models/m/predict") == "predict"
    assert scope_of("POST", "/v1/models/m/quantify") == "predict"
    assert scope_of("POST", "/v1/models/m/labels") == "ingest"
    assert scope_of("POST", "/v1/models/m/rollback") == "admin"
    assert scope_of("DELETE", "/v1/models/m") == "admin"
    assert scope_of("GET", "/metrics") == "read"
    assert scope_of("GET", "/healthz") is None


# ---- the cost budget --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def costly(make_settings) -> Iterator[tuple[TestClient, Any]]:  # type: ignore[no-untyped-def]
    st = make_settings()  # the default budget, 1e9
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        yield c, st


def test_the_issue_s_8mb_predict_on_dvaw_sa_is_refused_before_any_work(costly) -> None:  # type: ignore[no-untyped-def]
    c, st = costly
    mid = f"sa-{uuid.uuid4().hex[:6]}"
    assert c.post("/v1/models", json={"id": mid, "kind": "dvaw-sa", "dim": 100}).status_code == 201
    X = np.random.default_rng(7).normal(size=(10_000, 100))
    body = _binary(X)
    assert len(body) > 8_000_000
    r = c.post(
        f"/v1/models/{mid}/predict", content=body, headers={"content-type": PREDICT_CONTENT_TYPE}
    )
    assert r.status_code == 413, r.text[:300]
    detail = r.json()["detail"]
    fits = st.max_request_cost // int(row_cost("dvaw-sa", 100))  # ~585 rows
    assert "ONLINEPREDICT_MAX_REQUEST_COST" in detail and f"at most {fits} rows" in detail, detail
    # refused before the rows were stored for their labels (the route's first Redis write)
    r_ = redis_lib.Redis.from_url(st.redis_url)
    try:
        assert list(r_.scan_iter(match=f"{st.key_prefix}*pred*{mid}*")) == []
    finally:
        r_.close()
    # the same model answers a batch within the budget
    ok = c.post(f"/v1/models/{mid}/predict", json={"instances": X[:50].tolist()})
    assert ok.status_code == 200, ok.text[:300]
    assert len(ok.json()["predictions"]) == 50


def test_normal_requests_pass_the_default_budget(costly) -> None:  # type: ignore[no-untyped-def]
    c, _ = costly
    mid = f"pa-{uuid.uuid4().hex[:6]}"
    assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 100}).status_code == 201
    X = np.random.default_rng(8).normal(size=(10_000, 100))  # max_batch rows of a linear model
    r = c.post(
        f"/v1/models/{mid}/predict",
        content=_binary(X),
        headers={"content-type": PREDICT_CONTENT_TYPE},
    )
    assert r.status_code == 200, r.text[:300]
    events = {"events": [{"x": row, "y": 1.0} for row in X[:1000].tolist()]}  # the SDK's chunk
    assert c.post(f"/v1/models/{mid}/events", json=events).status_code == 202


def test_a_small_budget_bounds_events_and_quantify(make_settings) -> None:  # type: ignore[no-untyped-def]
    st = make_settings(max_request_cost=100_000)  # rows x (2,000 + 50 x 2) at d = 2: 47 rows
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        mid = f"q-{uuid.uuid4().hex[:6]}"
        spec = {"id": mid, "kind": "scan", "dim": 2}
        assert c.post("/v1/models", json=spec).status_code == 201
        many = {"events": [{"x": [0.1, 0.2], "y": 1} for _ in range(48)]}
        r = c.post(f"/v1/models/{mid}/events", json=many)
        assert r.status_code == 413 and "at most 47 rows" in r.json()["detail"], r.text
        assert (
            c.post(f"/v1/models/{mid}/events", json={"events": many["events"][:47]}).status_code
            == 202
        )
        q = c.post(f"/v1/models/{mid}/quantify", json={"instances": [[0.1, 0.2]] * 48})
        assert q.status_code == 413 and "quantify of 48 rows" in q.json()["detail"], q.text


# ---- caps on models and on total state ----------------------------------------------------------
def test_model_count_cap(make_settings) -> None:  # type: ignore[no-untyped-def]
    st = make_settings(max_models=2)
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        ids = [f"cap-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
        for mid in ids[:2]:
            assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        r = c.post("/v1/models", json={"id": ids[2], "kind": "pa", "dim": 2})
        assert r.status_code == 422 and "ONLINEPREDICT_MAX_MODELS" in r.json()["detail"], r.text
        assert c.delete(f"/v1/models/{ids[0]}").status_code == 204
        assert c.post("/v1/models", json={"id": ids[2], "kind": "pa", "dim": 2}).status_code == 201


def test_total_state_counts_the_kept_history(make_settings) -> None:  # type: ignore[no-untyped-def]
    from service.api.routes.models import check_state_budget
    from service.api.schemas import ModelSpec

    probe = make_settings()
    one = check_state_budget(ModelSpec(id="x", kind="vaw", dim=50), probe)
    # room for two models' single copies, but not for their history (1 + 10 copies each)
    st = make_settings(max_total_state_bytes=3 * one, history_keep=10)
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        r = c.post(
            "/v1/models", json={"id": f"big-{uuid.uuid4().hex[:6]}", "kind": "vaw", "dim": 50}
        )
        assert r.status_code == 422, r.text
        detail = r.json()["detail"]
        assert "x 11" in detail and "ONLINEPREDICT_MAX_TOTAL_STATE_BYTES" in detail, detail
    st = make_settings(max_total_state_bytes=12 * one, history_keep=10)
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        first = {"id": f"a-{uuid.uuid4().hex[:6]}", "kind": "vaw", "dim": 50}
        assert c.post("/v1/models", json=first).status_code == 201  # 11 copies fit in 12
        second = {"id": f"b-{uuid.uuid4().hex[:6]}", "kind": "vaw", "dim": 50}
        assert c.post("/v1/models", json=second).status_code == 422  # 22 do not


# ---- the concurrency limit (the middleware over an app that waits on an event) ----------------
def test_concurrency_limit_answers_503_and_spares_healthz() -> None:
    release = asyncio.Event()

    async def slow_app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["path"] == "/slow":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    latency = Histogram(
        "t_latency", "t", ["method", "path", "status"], registry=CollectorRegistry()
    )
    mw = LimitsAndTiming(slow_app, max_body_bytes=1024, latency=latency, max_concurrency=1)

    async def call(path: str) -> tuple[int, dict[str, str], bytes]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "headers": []}
        await mw(scope, receive, send)
        headers = {k.decode(): v.decode() for k, v in sent[0].get("headers", [])}
        return sent[0]["status"], headers, sent[1]["body"]

    async def run() -> None:
        first = asyncio.create_task(call("/slow"))
        while mw.in_flight == 0:  # the first request holds the one slot
            await asyncio.sleep(0)
        status, headers, body = await call("/other")
        assert status == 503 and headers["retry-after"] == "1"
        assert "ONLINEPREDICT_MAX_CONCURRENCY" in json.loads(body)["detail"]
        assert (await call("/healthz"))[0] == 200  # exempt
        release.set()
        assert (await first)[0] == 200
        assert (await call("/other"))[0] == 200  # the slot is free again

    asyncio.run(run())


def test_the_sdk_says_rate_limited(make_settings) -> None:  # type: ignore[no-untyped-def]
    from clients import Client, RateLimitedError
    from clients.http import RetryPolicy

    st = make_settings(rate_limits="read=2/m")
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        mid = f"sdk-{uuid.uuid4().hex[:6]}"
        assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        fast = RetryPolicy(attempts=2, backoff=0.01, max_backoff=0.05)
        sdk = Client("http://testserver", retry=fast, transport=c._transport)
        sdk.get_model(mid)
        sdk.get_model(mid)
        with pytest.raises(RateLimitedError) as err:  # retried once (idempotent), then raised
            sdk.get_model(mid)
        assert err.value.status == 429 and "'read' scope" in str(err.value)


def test_the_limiter_counts_on_a_redis_cluster(make_settings, redis_cluster) -> None:  # type: ignore[no-untyped-def]
    # the same counts through limits' cluster storage (async+redis+cluster://, redis-py)
    from service.api.ratelimit import RateLimiter

    st = make_settings(redis_url=redis_cluster.url, redis_mode="cluster", rate_limits="ingest=3/m")

    async def run() -> list[float | None]:
        one, two = RateLimiter(st), RateLimiter(st)  # two API processes' limiters
        try:
            waits = [await (one if i % 2 else two).retry_after("ingest", "key:k") for i in range(4)]
            waits.append(await one.retry_after("ingest", "key:other"))
            return waits
        finally:
            await one.aclose()
            await two.aclose()

    waits = asyncio.run(run())
    assert waits[:3] == [None, None, None] and waits[4] is None
    assert waits[3] is not None and 0 < waits[3] <= 60


def test_concurrent_scrapes_share_one_render(make_settings) -> None:  # type: ignore[no-untyped-def]
    from redis.asyncio import Redis

    from service.api.prometheus import ApiMetrics
    from service.api.redis_access import RedisAccess
    from service.store.keys import Keys

    st = make_settings()

    class Counted(ApiMetrics):
        def __init__(self) -> None:
            super().__init__()
            self.renders = 0
            self.hold = asyncio.Event()

        async def _render(self, store: RedisAccess) -> bytes:
            self.renders += 1
            await self.hold.wait()  # a render in progress while the others arrive
            return await super()._render(store)

    async def run() -> None:
        redis = Redis.from_url(st.redis_url)
        try:
            metrics, store = Counted(), RedisAccess(redis, Keys(st.key_prefix), None)
            scrapes = [asyncio.create_task(metrics.render(store)) for _ in range(4)]
            while metrics.renders == 0:
                await asyncio.sleep(0)
            await asyncio.sleep(0.01)  # the other three are waiting on the first
            metrics.hold.set()
            texts = await asyncio.gather(*scrapes)
            assert metrics.renders == 1 and len(set(texts)) == 1
            assert b"onlinepredict_api_redis_up 1.0" in texts[0]
            await metrics.render(store)  # a scrape after it renders afresh
            assert metrics.renders == 2
        finally:
            await redis.aclose()

    asyncio.run(run())
