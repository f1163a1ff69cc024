"""HTTP retries against a real broker (tansu behind a pausable proxy), a real Redis and a real
worker: a batch retried after its ack was lost is learned once, and a label whose API died
between its claim and its produce reaches Kafka on the retry and is learned once
(docs/design.md, "Idempotency-Key" and "Labels")."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis as redis_lib
from fastapi.testclient import TestClient

import service.api.broker
from clients.batch_answer import parse_prediction_id
from service.api import create_app
from service.config import Settings
from service.embedded import free_port
from tests._frames import record_events
from tests.chaos._harness import ChaosBroker, start_chaos_broker
from tests.service.conftest import ROOT, WorkerProcess, read_topic, run, settings_env, wait_for

pytestmark = pytest.mark.service

WAIT_S = 60.0  # a bound on a hang, never a timing assertion


@pytest.fixture
def chaos(make_settings, tmp_path: Path) -> Iterator[tuple[ChaosBroker, Settings]]:  # type: ignore[no-untyped-def]
    """A broker of its own, reached only through its proxy, and settings that use it."""
    broker = start_chaos_broker(tmp_path / "broker.log")
    try:
        settings = make_settings(
            kafka_bootstrap=broker.bootstrap, commit_every=20, commit_interval_s=0.2
        )
        yield broker, settings
    finally:
        broker.stop()


def model_records(settings: Settings, model: str) -> list[dict[str, Any]]:
    """The model's events on the topic (its creation marker left out)."""
    records = [
        ev
        for _, _, k, v in run(read_topic(settings, settings.events_topic))
        if k == model.encode()
        for ev in record_events(v)
    ]
    return [r for r in records if r.get("type") != "created"]


def learned(settings: Settings, model: str, records: int, tmp_path: Path) -> dict[str, int]:
    """Run a worker until it has processed all ``records`` of ``model``; its counters."""
    worker = WorkerProcess(settings, "retry-worker", tmp_path)
    worker.start()
    client = redis_lib.Redis.from_url(settings.redis_url)
    from service.store.keys import Keys

    state = Keys(settings.key_prefix).state(model)

    def counters() -> dict[str, int]:
        raw = client.hmget(state, ["applied", "duplicate", "rejected"])
        return dict(
            zip(("applied", "duplicate", "rejected"), (int(v or 0) for v in raw), strict=True)
        )

    try:
        wait_for(lambda: sum(counters().values()) >= records, WAIT_S, "the worker")
        return counters()
    finally:
        worker.stop()
        client.close()


def test_events_retried_after_a_lost_ack_are_learned_once(
    chaos: tuple[ChaosBroker, Settings], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker, settings = chaos
    # the API's send gives up after 2 s (15 s in service), while the proxy holds the ack
    monkeypatch.setattr(service.api.broker, "SEND_TIMEOUT_S", 2.0)
    n = 20
    body = {"events": [{"x": [float(i), 1.0], "y": float(i)} for i in range(n)]}
    key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}
    with TestClient(create_app(settings)) as client:
        mid = f"retry-{uuid.uuid4().hex[:8]}"
        assert (
            client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        )
        # connect the producer first, so the only reply held below is the produce's ack
        warm = {"events": [{"id": "warm", "x": [0.0, 0.0], "y": 0.0}]}
        assert client.post(f"/v1/models/{mid}/events", json=warm).status_code == 202
        broker.proxy.hold_replies()
        first = client.post(f"/v1/models/{mid}/events", json=body, headers=key)
        assert first.status_code == 503, first.text  # timed out waiting for the ack ...
        wait_for(lambda: broker.proxy.held_bytes > 0, WAIT_S, "the broker's held ack")
        broker.proxy.release_replies()
        retry = client.post(f"/v1/models/{mid}/events", json=body, headers=key)
        assert retry.status_code == 202, retry.text
    records = model_records(settings, mid)
    # ... after the broker had written the batch: it is in the log twice
    assert len(records) == 1 + 2 * n
    counts = learned(settings, mid, len(records), tmp_path)
    assert counts == {"applied": 1 + n, "duplicate": n, "rejected": 0}, counts
    assert {r["id"] for r in records} == {"warm", *retry.json()["ids"]}


# The API process: its Kafka timeouts raised, so its label's produce (the broker paused)
# waits until the test kills it, however slow the machine.
API_CODE = """
import uvicorn
import service.api.broker as broker
broker.SEND_TIMEOUT_S = 3600.0
broker.REQUEST_TIMEOUT_MS = 3_600_000
from service.api import create_app
from service.config import Settings
settings = Settings()
uvicorn.run(create_app(settings), host="127.0.0.1", port=settings.api_port, log_level="warning")
"""


def test_a_label_whose_api_died_between_claim_and_produce_is_learned_once(
    chaos: tuple[ChaosBroker, Settings], tmp_path: Path
) -> None:
    broker, settings = chaos
    port = free_port()
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        api = subprocess.Popen(
            [sys.executable, "-c", API_CODE],
            cwd=ROOT,
            env=settings_env(settings, ONLINEPREDICT_API_PORT=str(port)),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    mid = f"label-{uuid.uuid4().hex[:8]}"
    label = {"prediction_id": "", "y": 1.0}
    key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}
    redis = redis_lib.Redis.from_url(settings.redis_url)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S) as http:

            def up() -> bool:
                assert api.poll() is None, log.read_text(errors="replace")
                try:
                    return http.get("/healthz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(up, WAIT_S, "the API process")
            assert (
                http.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
            )
            warm = {"events": [{"id": "warm", "x": [0.0, 0.0], "y": 0.0}]}
            assert http.post(f"/v1/models/{mid}/events", json=warm).status_code == 202
            pred = http.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 2.0]})
            label["prediction_id"] = pred.json()["predictions"][0]["prediction_id"]

            broker.proxy.pause()  # the label's produce cannot reach the broker
            answer: list[Any] = []

            def send() -> None:
                try:
                    answer.append(http.post(f"/v1/models/{mid}/labels", json=label, headers=key))
                except httpx.TransportError as exc:
                    answer.append(exc)

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            from service.store.keys import Keys

            # the prediction's row of its request's record (docs/design.md, "Redis keys")
            parsed = parse_prediction_id(str(label["prediction_id"]))
            assert parsed is not None
            pkey = Keys(settings.key_prefix).predictions(mid, parsed[0])
            claim = f"l:{parsed[1]}"
            wait_for(lambda: redis.hexists(pkey, claim), WAIT_S, "the label's claim")
            api.kill()  # between the claim and the produce
            api.wait(10)
            sender.join(WAIT_S)
            assert answer and isinstance(answer[0], httpx.TransportError), answer  # no answer
    finally:
        if api.poll() is None:
            api.kill()
            api.wait(10)
        redis.close()
    broker.proxy.resume()
    with TestClient(create_app(settings)) as client:  # the retry, on a new API
        retry = client.post(f"/v1/models/{mid}/labels", json=label, headers=key)
        assert retry.status_code == 202, retry.text
    records = model_records(settings, mid)
    counts = learned(settings, mid, len(records), tmp_path)
    event_id = f"label:{label['prediction_id']}"
    labels = [r for r in records if r["id"] == event_id]
    # the label reached Kafka on the retry, and is learned once with the warm-up event
    assert (counts["applied"], len(labels), retry.json()["status"]) == (2, 1, "accepted"), (
        counts,
        labels,
        retry.json(),
    )
    assert labels[0]["y"] == 1.0 and labels[0]["x"] == [1.0, 2.0]
