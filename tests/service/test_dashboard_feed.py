"""The dashboard feed's ``status`` per model (the picker's status filter,
service/dashboard/router.py): ``new`` before the first checkpoint, ``learning`` after it,
``refusing`` exactly when GET /v1/models/{id} says ``refusing``, ``halted`` when the model
stopped learning. Real Redis and broker of the session."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.service._api_helpers import pa_with_weights, redis_call, write_state

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api_settings(make_settings: Any) -> Settings:
    return make_settings(series_interval_s=0)  # type: ignore[no-any-return]


def status(client: TestClient, mid: str) -> str:
    feed = client.get("/v1/dashboard/data").json()["models"]
    return str(next(m for m in feed if m["id"] == mid)["status"])


def test_status_follows_the_model(client: TestClient, api_settings: Settings) -> None:
    mid = f"feed-{uuid.uuid4().hex[:8]}"
    assert client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3}).status_code == 201
    assert status(client, mid) == "new"
    write_state(api_settings, mid, pa_with_weights([0.0] * 3), 0, offset=1, applied=5)
    assert status(client, mid) == "learning"

    def refused(events: int, n: int) -> None:
        async def go(redis: Any, keys: Any) -> None:
            await redis.hset(keys.refused(mid), mapping={"events": events, "refused": n})

        redis_call(api_settings, go)

    for events, n in ((10, 10), (40, 19), (40, 20)):  # too few to tell; under half; half
        refused(events, n)
        said = client.get(f"/v1/models/{mid}").json()["status"]["refusing"]
        assert status(client, mid) == ("refusing" if said else "learning"), (events, n)
    assert status(client, mid) == "refusing"

    async def halt(redis: Any, keys: Any) -> None:
        await redis.hset(keys.state(mid), "halted", "the log diverged")

    redis_call(api_settings, halt)
    assert client.get(f"/v1/models/{mid}").json()["status"]["halted"]
    assert status(client, mid) == "halted"
