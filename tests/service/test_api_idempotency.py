"""The Idempotency-Key header and the pending label claim over HTTP, against a real Redis
and broker (docs/design.md, "Idempotency-Key" and "Labels"). The key's parsing and id
derivation: ``test_idempotency_units.py``; a retry after a lost ack and a killed API:
``test_api_retries.py``."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.api.idempotency import derived_event_id, key_digest
from service.config import Settings
from service.embedded import free_port
from tests.service._api_helpers import events_for, record_of, redis_call

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings()


def create(client: TestClient) -> str:
    mid = f"idem-{uuid.uuid4().hex[:8]}"
    r = client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2})
    assert r.status_code == 201, r.text
    return mid


def key_header(key: str) -> dict[str, str]:
    return {"Idempotency-Key": f'"{key}"'}


def predict(client: TestClient, mid: str) -> str:
    r = client.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 2.0]})
    return r.json()["predictions"][0]["prediction_id"]  # type: ignore[no-any-return]


def test_events_with_a_key_get_derived_ids_and_a_retry_gets_the_same(client: TestClient) -> None:
    mid = create(client)
    key = str(uuid.uuid4())
    body = {"events": [{"x": [1, 2], "y": 1.0}, {"id": "own", "x": [3, 4]}, {"x": [5, 6]}]}
    first = client.post(f"/v1/models/{mid}/events", json=body, headers=key_header(key))
    assert first.status_code == 202, first.text
    ids = first.json()["ids"]
    # events with their own id keep it; the index counts every event of the batch
    assert ids == [derived_event_id(mid, key, 0), "own", derived_event_id(mid, key, 2)]
    again = client.post(f"/v1/models/{mid}/events", json=body, headers={"Idempotency-Key": key})
    assert again.status_code == 202 and again.json()["ids"] == ids  # bare key: the same key
    # without a key every request is a new operation: new random ids
    plain = client.post(f"/v1/models/{mid}/events", json=body).json()["ids"]
    assert plain[1] == "own" and not {plain[0], plain[2]} & set(ids)


def test_a_key_reused_with_another_body_is_a_readable_422_and_produces_nothing(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    key = str(uuid.uuid4())
    body = {"events": [{"x": [1, 2], "y": 1.0}]}
    ok = client.post(f"/v1/models/{mid}/events", json=body, headers=key_header(key))
    assert ok.status_code == 202
    changed = {"events": [{"x": [1, 2], "y": 2.0}]}
    r = client.post(f"/v1/models/{mid}/events", json=changed, headers=key_header(key))
    assert r.status_code == 422
    detail = r.json()["detail"]
    assert "Idempotency-Key was used before with another request body" in detail
    assert f"POST /v1/models/{mid}/events" in detail and "new key" in detail
    # the key names the operation, not the endpoint: on /labels it is reused too
    pid = predict(client, mid)
    r = client.post(
        f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 1.0}, headers=key_header(key)
    )
    assert r.status_code == 422 and "/labels" in r.json()["detail"]
    # the same key on another model is another key
    other = create(client)
    assert (
        client.post(f"/v1/models/{other}/events", json=changed, headers=key_header(key)).status_code
        == 202
    )
    client.post(f"/v1/models/{mid}/events", json={"events": [{"id": "marker", "x": [0, 0]}]})
    got = events_for(api_settings, mid, lambda f: any(e["id"] == "marker" for e in f))
    assert [e["y"] for e in got if e["id"] != "marker"] == [1.0]  # the 422s produced nothing


@pytest.mark.parametrize(
    "headers",
    [
        [("Idempotency-Key", '"unterminated')],
        [("Idempotency-Key", "x" * 256)],
        [("Idempotency-Key", '""')],
        [("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
    ],
)
def test_a_malformed_or_repeated_key_is_422(client: TestClient, headers: list[Any]) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/events", json={"events": [{"x": [1, 2]}]}, headers=headers)
    assert r.status_code == 422 and "Idempotency-Key" in r.json()["detail"], r.text


def test_label_answers_with_a_key(client: TestClient) -> None:
    mid = create(client)
    pid = predict(client, mid)
    key = str(uuid.uuid4())
    label = {"prediction_id": pid, "y": 1.0}
    url = f"/v1/models/{mid}/labels"
    first = client.post(url, json=label, headers=key_header(key))
    assert first.status_code == 202 and first.json()["status"] == "accepted"
    # the retry of the accepted request gets its answer again; any other label is a duplicate
    assert client.post(url, json=label, headers=key_header(key)).json()["status"] == "accepted"
    other_key = client.post(url, json=label, headers=key_header(str(uuid.uuid4())))
    assert other_key.json()["status"] == "duplicate"
    assert client.post(url, json=label).json()["status"] == "duplicate"
    changed = client.post(url, json={"prediction_id": pid, "y": -1.0}, headers=key_header(key))
    assert changed.status_code == 422


def test_a_label_whose_produce_failed_stays_claimed_with_its_value(
    settings: Settings,
) -> None:
    """A 503 leaves the claim pending: the next label produces the claimed value (the failed
    send may have landed, and the workers would keep its copy), so another value answers
    duplicate, and the log holds the first value only."""
    dead = settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"})
    with (
        TestClient(create_app(dead), raise_server_exceptions=False) as down,
        TestClient(create_app(settings)) as live,
    ):
        mid = create(live)
        pid = predict(live, mid)
        url = f"/v1/models/{mid}/labels"
        assert down.post(url, json={"prediction_id": pid, "y": 1.0}).status_code == 503

        async def state(redis, keys):  # type: ignore[no-untyped-def]
            key, row = record_of(keys, mid, pid)
            return await redis.hget(key, f"l:{row}")

        assert redis_call(settings, state) == b"pending"
        r = live.post(url, json={"prediction_id": pid, "y": -1.0})
        assert r.status_code == 202 and r.json()["status"] == "duplicate"
        assert redis_call(settings, state) == b"done"
        live.post(f"/v1/models/{mid}/events", json={"events": [{"id": "marker", "x": [0, 0]}]})
        got = events_for(settings, mid, lambda f: any(e["id"] == "marker" for e in f))
        assert [(e["id"], e["y"]) for e in got] == [(f"label:{pid}", 1.0), ("marker", None)]


def test_deleting_a_model_deletes_its_key_records(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    key = str(uuid.uuid4())
    client.post(
        f"/v1/models/{mid}/events", json={"events": [{"x": [1, 2]}]}, headers=key_header(key)
    )

    async def exists(redis, keys):  # type: ignore[no-untyped-def]
        return await redis.exists(keys.idempotency(mid, key_digest(key)))

    assert redis_call(api_settings, exists) == 1
    assert client.delete(f"/v1/models/{mid}").status_code == 204
    assert redis_call(api_settings, exists) == 0
