"""What the API serves after Redis loses writes (docs/reliability.md, "Redis loses writes").

A Redis restarted from an older snapshot hands version numbers out again: the worker
re-learns the lost events and writes version N again, another state under the same number.
The API's model cache keyed on the version alone kept serving the lost state of an idle
model for good (the audit of issue 32: a 200-event learner for 4-7 of 10 idle models for
the whole 60 s while Redis held the 300-event state). It keys on the write token now.
"""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from tests.service._api_helpers import pa_with_weights, redis_call, write_state

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings()


def _lose_state(settings: Settings, model: str) -> None:
    """The state hash as a snapshot from before the model's first checkpoint has it: gone."""

    async def go(redis, keys):  # type: ignore[no-untyped-def]
        await redis.delete(keys.state(model))

    redis_call(settings, go)


@pytest.mark.parametrize("body", [{"x": [1.0, 2.0, 3.0]}, {"instances": [[1.0, 2.0, 3.0]]}])
def test_an_idle_model_is_served_the_state_redis_holds_after_a_loss(
    api_settings: Settings, body: dict[str, object]
) -> None:
    with TestClient(create_app(api_settings)) as client:
        mid = f"loss-{uuid.uuid4().hex[:8]}"
        r = client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3})
        assert r.status_code == 201, r.text
        # version 1 as the API saw it before the loss (weights 1, 0, 0: predicts 1)
        assert (
            write_state(api_settings, mid, pa_with_weights([1.0, 0.0, 0.0]), 0, 0, token="t1") == 1
        )
        first = client.post(f"/v1/models/{mid}/predict", json=body).json()
        assert first["model_version"] == 1 and first["predictions"][0]["value"] == 1.0
        # Redis loses it; the worker re-learns the log and writes version 1 again, another
        # state (weights 0, 1, 1: predicts 5) with another write token
        _lose_state(api_settings, mid)
        assert (
            write_state(api_settings, mid, pa_with_weights([0.0, 1.0, 1.0]), 0, 7, token="t2") == 1
        )
        # the model stays idle: the very next predict serves what Redis holds
        after = client.post(f"/v1/models/{mid}/predict", json=body).json()
        assert after["model_version"] == 1
        assert after["predictions"][0]["value"] == 5.0, "served the state Redis lost"
