"""HTTP API failure modes: API key (401), body size (413), Redis or Kafka down (503, never
500), with real services (and closed ports standing in for dead ones)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from service.embedded import free_port

pytestmark = pytest.mark.service

KEY = "s3cret-key"


def new_id() -> str:
    return f"m-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def keyed(make_settings) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    with TestClient(create_app(make_settings(api_key=KEY))) as c:
        yield c


def spec() -> dict[str, object]:
    return {"id": new_id(), "kind": "pa", "dim": 2}


def test_write_endpoints_need_the_key(keyed: TestClient) -> None:
    for headers in ({}, {"X-API-Key": "wrong"}, {"X-API-Key": KEY + "x"}, {"X-API-Key": ""}):
        r = keyed.post("/v1/models", json=spec(), headers=headers)
        assert r.status_code == 401, (headers, r.text)
        assert "API key" in r.json()["detail"]
        assert r.headers["www-authenticate"] == "ApiKey"
    body = spec()
    assert keyed.post("/v1/models", json=body, headers={"X-API-Key": KEY}).status_code == 201
    mid = body["id"]
    assert (
        keyed.post(
            "/v1/models", json=spec(), headers={"Authorization": f"Bearer {KEY}"}
        ).status_code
        == 201
    )

    # Reads and predict need the key too (docs/security.md); so do writes on the model.
    assert keyed.get(f"/v1/models/{mid}").status_code == 401
    assert keyed.post(f"/v1/models/{mid}/predict", json={"x": [1, 2]}).status_code == 401
    assert keyed.get(f"/v1/models/{mid}", headers={"X-API-Key": KEY}).status_code == 200
    pred = keyed.post(f"/v1/models/{mid}/predict", json={"x": [1, 2]}, headers={"X-API-Key": KEY})
    assert pred.status_code == 200
    pid = pred.json()["predictions"][0]["prediction_id"]
    writes = [
        ("post", f"/v1/models/{mid}/events", {"events": [{"x": [1, 2]}]}),
        ("post", f"/v1/models/{mid}/labels", {"prediction_id": pid, "y": 1.0}),
        ("post", f"/v1/models/{mid}/blocks", {"vectors": [[1, 2]]}),
        ("delete", f"/v1/models/{mid}", None),
    ]
    for method, path, body in writes:
        r = keyed.request(method, path, json=body)
        assert r.status_code == 401, (path, r.text)
    ok = keyed.post(
        f"/v1/models/{mid}/labels",
        json={"prediction_id": pid, "y": 1.0},
        headers={"X-API-Key": KEY},
    )
    assert ok.status_code == 202
    assert keyed.delete(f"/v1/models/{mid}", headers={"X-API-Key": KEY}).status_code == 204


def test_reads_need_the_key_and_key_on_reads_is_ignored(make_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    # ONLINEPREDICT_API_KEY_ON_READS=false is accepted, logged as deprecated, and ignored
    settings = make_settings(api_key=KEY, api_key_on_reads=False)
    with caplog.at_level("WARNING"), TestClient(create_app(settings)) as c:
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"X-API-Key": KEY}).status_code == 200
        assert c.get("/healthz").status_code == 200  # probes never need a key
        assert c.get("/metrics").status_code == 401  # every model's figures: read scope
        assert c.get("/metrics", headers={"X-API-Key": KEY}).status_code == 200
    assert "ONLINEPREDICT_API_KEY_ON_READS is deprecated and ignored" in caplog.text


def test_body_size_limit_is_413(make_settings) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(make_settings(max_body_bytes=2048))) as c:
        mid = new_id()
        assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        big = {"instances": [[1.0, 2.0]] * 400}
        r = c.post(f"/v1/models/{mid}/predict", json=big)
        assert r.status_code == 413 and "2048" in r.json()["detail"]

        def chunks() -> Iterator[bytes]:  # no content-length: counted while received
            yield b'{"instances": ['
            for _ in range(300):
                yield b"[1.0, 2.0],"
            yield b"[1.0, 2.0]]}"

        r = c.post(
            f"/v1/models/{mid}/predict",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        assert r.status_code == 413, r.text
        ok = c.post(f"/v1/models/{mid}/predict", json={"instances": [[1.0, 2.0]] * 10})
        assert ok.status_code == 200


def test_redis_down_is_503_never_500(settings: Settings) -> None:
    dead = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    with TestClient(create_app(dead), raise_server_exceptions=False) as c:
        mid = new_id()
        calls = [
            ("get", "/v1/models", None),
            ("post", "/v1/models", {"id": mid, "kind": "pa", "dim": 2}),
            ("get", f"/v1/models/{mid}", None),
            ("delete", f"/v1/models/{mid}", None),
            ("post", f"/v1/models/{mid}/predict", {"x": [1, 2]}),
            ("post", f"/v1/models/{mid}/events", {"events": [{"x": [1, 2]}]}),
            ("post", f"/v1/models/{mid}/labels", {"prediction_id": "p", "y": 1}),
            ("post", f"/v1/models/{mid}/quantify", {"instances": [[1, 2]]}),
            ("get", f"/v1/models/{mid}/portfolio", None),
            ("post", f"/v1/models/{mid}/blocks", {"vectors": [[1, 2]]}),
        ]
        for method, path, body in calls:
            r = c.request(method, path, json=body)
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.json()["detail"].startswith("Redis unavailable")
            assert r.headers["retry-after"] == "5"
        ready = c.get("/readyz")  # ready or not, nothing more (the cause is in the log)
        assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}
        assert c.get("/healthz").status_code == 200
        metrics = c.get("/metrics")
        assert metrics.status_code == 200 and "onlinepredict_api_redis_up 0.0" in metrics.text
        # Bad input is still judged as bad input where no Redis is needed to see it.
        assert c.post("/v1/models", json={"id": "x y", "kind": "pa", "dim": 2}).status_code == 422


def test_readyz_needs_the_events_topic(settings: Settings, caplog) -> None:  # type: ignore[no-untyped-def]
    missing = settings.model_copy(update={"events_topic": f"no-such-{uuid.uuid4().hex[:8]}"})
    with caplog.at_level("WARNING"), TestClient(create_app(missing)) as c:
        r = c.get("/readyz")
        assert r.status_code == 503 and r.json() == {"status": "unavailable"}
    assert "does not exist" in caplog.text and "does not exist" not in r.text


def test_kafka_down_is_503_and_the_label_can_be_retried(settings: Settings) -> None:
    dead = settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"})
    with (
        TestClient(create_app(dead), raise_server_exceptions=False) as c,
        TestClient(create_app(settings)) as live,
    ):
        mid = new_id()
        spec = {"id": mid, "kind": "pa", "dim": 2}
        r = c.post("/v1/models", json=spec)  # creating produces the model's created marker
        assert r.status_code == 503 and r.json()["detail"].startswith("Kafka unavailable")
        assert c.get(f"/v1/models/{mid}").status_code == 404  # nothing half-created
        assert live.post("/v1/models", json=spec).status_code == 201
        pred = c.post(f"/v1/models/{mid}/predict", json={"x": [1, 2]})
        assert pred.status_code == 200  # predictions need Redis only
        pid = pred.json()["predictions"][0]["prediction_id"]
        r = c.post(f"/v1/models/{mid}/events", json={"events": [{"x": [1, 2], "y": 1}]})
        assert r.status_code == 503 and r.json()["detail"].startswith("Kafka unavailable")
        r = c.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 1})
        assert r.status_code == 503
        ready = c.get("/readyz")
        assert ready.status_code == 503 and ready.json() == {"status": "unavailable"}
        # The failed label's claim stays pending: with the broker back the retry produces it.
        r = live.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 1})
        assert r.status_code == 202 and r.json()["status"] == "accepted"
        r = live.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 1})
        assert r.json()["status"] == "duplicate"


def test_a_real_bug_is_a_logged_500(settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    from service.api.deps import get_cache

    class Broken:
        async def get(
            self, spec: object, version: int | None = None, token: str | None = None
        ) -> object:
            raise RuntimeError("boom")

    app = create_app(settings)
    app.dependency_overrides[get_cache] = Broken
    with TestClient(app, raise_server_exceptions=False) as c:
        mid = new_id()
        assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        r = c.post(f"/v1/models/{mid}/predict", json={"x": [1, 2]})
    assert r.status_code == 500 and r.json() == {"detail": "internal error (logged)"}
    assert any(
        "boom" in (rec.exc_text or "") or "boom" in str(rec.exc_info) for rec in caplog.records
    )


def test_redis_restart_mid_life_is_503_then_recovers(settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from service.embedded import start_redis

    server = start_redis(data_dir=str(tmp_path), persist=True)
    try:
        own = settings.model_copy(update={"redis_url": server.url})
        with TestClient(create_app(own), raise_server_exceptions=False) as c:
            mid = new_id()
            assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
            assert c.post(f"/v1/models/{mid}/predict", json={"x": [1, 2]}).status_code == 200
            server.kill()
            for method, path, body in [
                ("post", f"/v1/models/{mid}/predict", {"x": [1, 2]}),
                ("get", f"/v1/models/{mid}", None),
                ("post", f"/v1/models/{mid}/events", {"events": [{"x": [1, 2]}]}),
            ]:
                r = c.request(method, path, json=body)
                assert r.status_code == 503, (path, r.status_code, r.text)
            server = start_redis(port=server.port, data_dir=str(tmp_path), persist=True)
            r = c.post(f"/v1/models/{mid}/predict", json={"x": [1, 2]})
            assert r.status_code == 200, r.text  # the pool reconnects; the spec survived (AOF)
    finally:
        server.stop()
