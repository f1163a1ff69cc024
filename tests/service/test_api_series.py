"""``GET /v1/models/{id}/series`` (docs/design.md, "HTTP API") against the real Redis and
broker of the session: the sampler's points, their bound and order, 404 and 422.

The app here does not sample by itself (``series_interval_s=0``): each test drives
``SeriesSampler.sample_once`` with a fixed clock, so the points are deterministic.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import learners
from service.api import create_app
from service.api.series import SeriesSampler
from service.config import Settings
from service.metrics.running import RunningStats
from service.store.series import SeriesPoint
from tests.service._api_helpers import pa_with_weights, redis_call, write_state
from tests.service.conftest import wait_for

pytestmark = pytest.mark.service

CAPACITY = 5


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(series_interval_s=0, series_points=CAPACITY)


def create(client: TestClient, mid: str | None = None) -> str:
    mid = mid or f"s-{uuid.uuid4().hex[:8]}"
    r = client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3})
    assert r.status_code == 201, r.text
    return mid


def stats_blob(n: int) -> bytes:
    """Running statistics after ``n`` regression steps (a tracking error far below the RMSE)."""
    stats = RunningStats("regression", 3)
    rng = np.random.default_rng(n)
    for _ in range(n):
        x = rng.normal(size=3)
        stats.update(x, float(x.sum()), 0.0, float(x.sum()) ** 2, {})
    return learners.encode_state(stats.state())


def sample(settings: Settings, last: dict[str, int], ts: float) -> int:
    """One sampler pass at Unix time ``ts``; ``last`` carries its memory between passes."""

    async def go(redis: Any, keys: Any) -> int:
        sampler = SeriesSampler(
            redis, keys, interval_s=1.0, capacity=settings.series_points, clock=lambda: ts
        )
        sampler.last_version = dict(last)
        n = await sampler.sample_once()
        last.clear()
        last.update(sampler.last_version)
        return n

    return int(redis_call(settings, go))


def points(client: TestClient, mid: str, **params: Any) -> list[dict[str, Any]]:
    r = client.get(f"/v1/models/{mid}/series", params=params)
    assert r.status_code == 200, r.text
    return r.json()["points"]  # type: ignore[no-any-return]


def test_series_is_empty_before_the_first_checkpoint(client: TestClient) -> None:
    mid = create(client)
    body = client.get(f"/v1/models/{mid}/series").json()
    assert body == {"model": mid, "interval_s": 0.0, "capacity": CAPACITY, "points": []}


def test_series_keeps_the_last_points_oldest_first(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    last: dict[str, int] = {}
    learner = pa_with_weights([0.0, 0.0, 0.0])
    version = write_state(api_settings, mid, learner, 0, offset=1, applied=10, stats=stats_blob(10))
    sample(api_settings, last, 1000.0)
    sample(api_settings, last, 1001.0)  # no new checkpoint: no new point
    (only,) = points(client, mid)
    assert only["ts"] == 1000.0 and only["version"] == version == 1
    assert only["applied"] == 10 and isinstance(only["applied"], int)
    assert {"cumulative_loss", "cumulative_regret", "rmse", "tracking_error"} <= set(only["values"])
    assert only["values"]["tracking_error"] < only["values"]["rmse"] / 3  # sqrt(n) apart
    assert only["values"]["labelled_events"] == 10

    for i in range(2, 9):  # seven more checkpoints, sampled one second apart
        version = write_state(
            api_settings, mid, learner, version, offset=i, applied=10 * i, stats=stats_blob(i)
        )
        sample(api_settings, last, 1000.0 + i)
    kept = points(client, mid)
    assert len(kept) == CAPACITY  # the oldest were trimmed
    assert [p["version"] for p in kept] == [4, 5, 6, 7, 8]
    assert [p["ts"] for p in kept] == sorted(p["ts"] for p in kept)
    assert [p["applied"] for p in kept] == [40, 50, 60, 70, 80]

    assert [p["version"] for p in points(client, mid, limit=2)] == [7, 8]
    assert [p["version"] for p in points(client, mid, since=1006.0)] == [7, 8]
    assert [p["version"] for p in points(client, mid, since=1004.5, limit=1)] == [8]
    assert points(client, mid, limit=10_000) == kept


def test_unreadable_entries_are_skipped(client: TestClient, api_settings: Settings) -> None:
    mid = create(client)
    good = SeriesPoint(ts=5.0, version=1, applied=1, duplicate=0, rejected=0, values={"rmse": 1.0})

    async def push(redis: Any, keys: Any) -> None:
        await redis.rpush(keys.series(mid), b"not json", b'{"ts": 1}', good.to_json())

    redis_call(api_settings, push)
    assert points(client, mid) == [
        {"ts": 5.0, "version": 1, "applied": 1, "duplicate": 0, "rejected": 0,
         "values": {"rmse": 1.0}}
    ]  # fmt: skip


def test_unknown_model_is_404(client: TestClient) -> None:
    r = client.get("/v1/models/no-such-model/series")
    assert r.status_code == 404 and "no-such-model" in r.json()["detail"]


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("limit=0", "limit"),
        ("limit=-3", "limit"),
        ("limit=10001", "limit"),
        ("limit=many", "limit"),
        ("limit=1.5", "limit"),
        ("since=-1", "since"),
        ("since=nan", "since"),
        ("since=inf", "since"),
        ("since=yesterday", "since"),
    ],
)
def test_bad_parameters_are_a_readable_422(client: TestClient, query: str, needle: str) -> None:
    mid = create(client)
    r = client.get(f"/v1/models/{mid}/series?{query}")
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]


def test_series_is_deleted_with_its_model(client: TestClient, api_settings: Settings) -> None:
    mid = create(client)
    write_state(api_settings, mid, pa_with_weights([0.0] * 3), 0, offset=1, applied=1)
    sample(api_settings, {}, 2000.0)
    assert len(points(client, mid)) == 1
    assert client.delete(f"/v1/models/{mid}").status_code == 204

    async def exists(redis: Any, keys: Any) -> int:
        return int(await redis.exists(keys.series(mid)))

    assert redis_call(api_settings, exists) == 0

    # a point written after the delete (a sample racing it) is not the next model's past
    stale = SeriesPoint(ts=1.0, version=9, applied=9, duplicate=0, rejected=0)

    async def late_sample(redis: Any, keys: Any) -> None:
        await redis.rpush(keys.series(mid), stale.to_json())

    redis_call(api_settings, late_sample)
    create(client, mid)
    assert points(client, mid) == []


def test_the_api_samples_by_itself(make_settings: Any) -> None:
    settings = make_settings(series_interval_s=0.2, series_points=CAPACITY)
    with TestClient(create_app(settings)) as c:
        mid = create(c)
        write_state(settings, mid, pa_with_weights([0.0] * 3), 0, offset=1, applied=3)
        started = time.time()
        wait_for(lambda: bool(points(c, mid)), 10, "the API's sampler to write a point")
        (p,) = points(c, mid)
        assert p["version"] == 1 and p["applied"] == 3 and p["ts"] >= started - 1


def test_dashboard_feed_lists_the_demo_model_first(make_settings: Any) -> None:
    from service.embedded.demo import MODEL_ID

    settings = make_settings(series_interval_s=0)
    with TestClient(create_app(settings)) as c:
        for mid in ("aaa-first-by-name", MODEL_ID, "zzz-last"):
            create(c, mid)
        ids = [m["id"] for m in c.get("/v1/dashboard/data").json()["models"]]
    assert ids == [MODEL_ID, "aaa-first-by-name", "zzz-last"]


def test_figures_of_one_model_are_its_entry_of_the_dashboard_feed(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    before = client.get(f"/v1/models/{mid}/metrics")
    assert before.status_code == 200, before.text
    assert before.json() == {
        "id": mid,
        "kind": "pa",
        "version": 0,
        "counters": {"applied": 0, "duplicate": 0, "rejected": 0},
        "figures": {},
        "diagnostics": {},
        "holdings": [],
    }
    version = write_state(
        api_settings, mid, pa_with_weights([1.0, 2.0, 3.0]), 0, offset=6, applied=7,
        stats=stats_blob(7),
    )  # fmt: skip
    body = client.get(f"/v1/models/{mid}/metrics").json()
    assert client.get(f"/v1/models/{mid}/figures").json() == body  # the deprecated name
    assert body["version"] == version and body["counters"]["applied"] == 7
    assert body["figures"]["labelled_events"] == 7 and body["figures"]["rmse"] > 0
    feed = client.get("/v1/dashboard/data").json()["models"]
    entry = next(m for m in feed if m["id"] == mid)
    assert entry.pop("status") == "learning"  # the picker's word (service/dashboard/router.py)
    assert {k: body[k] for k in entry} == entry
    # a checkpoint with its figures stored: they are read as stored, the statistics unread
    stored = b'{"figures":{"rmse":9.5},"diagnostics":{"epsilon":0.25},"holdings":[["a",1.0]]}'
    write_state(
        api_settings, mid, pa_with_weights([1.0, 2.0, 3.0]), version, offset=7, applied=8,
        stats=b"not a codec blob", figures=stored,
    )  # fmt: skip
    body = client.get(f"/v1/models/{mid}/metrics").json()
    assert (body["figures"], body["diagnostics"]) == ({"rmse": 9.5}, {"epsilon": 0.25})
    assert body["holdings"] == [["a", 1.0]] and body["counters"]["applied"] == 8
    missing = client.get("/v1/models/no-such-model/metrics")
    assert missing.status_code == 404 and "no-such-model" in missing.json()["detail"]
