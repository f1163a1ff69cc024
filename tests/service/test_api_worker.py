"""The API with a real worker process: events are learned, predictions come from the
worker's checkpoints, a delayed label is learned exactly once, re-sent ids change nothing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.config import Settings
from tests.service._api_helpers import api_and_worker, redis_call

pytestmark = pytest.mark.service

WAIT_S = 30.0


@pytest.fixture(scope="module")
def stack(make_settings) -> Iterator[tuple[TestClient, Settings]]:  # type: ignore[no-untyped-def]
    settings: Settings = make_settings(commit_interval_s=0.2, commit_every=20)
    with api_and_worker(settings) as client:
        yield client, settings


def wait_status(client: TestClient, mid: str, done: Callable[[dict[str, Any]], bool]) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + WAIT_S
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = client.get(f"/v1/models/{mid}").json()["status"]
        if done(status):
            return status
        time.sleep(0.1)
    raise AssertionError(f"worker did not get there in {WAIT_S}s: {status}")


def test_learn_predict_label_once(stack: tuple[TestClient, Settings]) -> None:
    client, _ = stack
    mid = "e2e-pa"
    spec = {
        "id": mid,
        "kind": "pa",
        "dim": 3,
        "params": {"variant": "pa2", "C": 10.0, "epsilon": 0.0},
    }
    assert client.post("/v1/models", json=spec).status_code == 201
    rng = np.random.default_rng(7)
    w = np.array([1.0, -2.0, 0.5])
    X = rng.normal(size=(300, 3))
    events = [{"id": f"e{i}", "x": X[i].tolist(), "y": float(X[i] @ w)} for i in range(300)]
    for i in range(0, 300, 100):
        r = client.post(f"/v1/models/{mid}/events", json={"events": events[i : i + 100]})
        assert r.status_code == 202
    status = wait_status(client, mid, lambda s: s["applied"] == 300)
    assert status["version"] >= 1 and status["duplicate"] == 0

    # Predictions come from the worker's checkpoint: an in-process replay gives the same value.
    import learners

    replay = learners.build("pa", 3, variant="pa2", C=10.0, epsilon=0.0)
    for e in events:
        replay.learn(e["x"], e["y"])
    probe = [0.3, 0.2, -0.1]
    p = client.post(f"/v1/models/{mid}/predict", json={"x": probe}).json()
    assert p["model_version"] == status["version"]
    assert p["predictions"][0]["value"] == replay.predict(probe).value

    # The delayed label is learned once; a second label and re-sent ids change nothing.
    pid = p["predictions"][0]["prediction_id"]
    y = float(np.asarray(probe) @ w)
    assert (
        client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": y}).json()[
            "status"
        ]
        == "accepted"
    )
    assert (
        client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": y}).json()[
            "status"
        ]
        == "duplicate"
    )
    resent = client.post(f"/v1/models/{mid}/events", json={"events": events[:25]})
    assert resent.status_code == 202
    status = wait_status(client, mid, lambda s: s["applied"] == 301 and s["duplicate"] == 25)
    replay.learn(probe, y)
    after = client.post(f"/v1/models/{mid}/predict", json={"x": probe}).json()
    assert after["model_version"] == status["version"]
    assert after["predictions"][0]["value"] == replay.predict(probe).value
    metrics = client.get("/metrics").text
    assert f'onlinepredict_events_total{{model="{mid}",outcome="applied"}} 301.0' in metrics
    assert f'onlinepredict_events_total{{model="{mid}",outcome="duplicate"}} 25.0' in metrics


def test_registered_block_is_applied_by_the_worker(stack: tuple[TestClient, Settings]) -> None:
    import learners

    assert "transductive" in learners.REGISTRY
    client, _ = stack
    mid = "e2e-transductive"
    assert (
        client.post("/v1/models", json={"id": mid, "kind": "transductive", "dim": 2}).status_code
        == 201
    )
    block = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    r = client.post(f"/v1/models/{mid}/blocks", json={"id": "block-1", "vectors": block})
    assert r.status_code == 202
    status = wait_status(client, mid, lambda s: s["applied"] + s["rejected"] >= 1)
    assert status["applied"] == 1 and status["rejected"] == 0
    p = client.post(f"/v1/models/{mid}/predict", json={"x": block[2]})
    assert p.status_code == 200 and p.json()["model_version"] == status["version"]


def test_recreated_model_learns_only_its_own_events(stack: tuple[TestClient, Settings]) -> None:
    """Deleting a model and creating one with the same id starts a new lineage: the new
    model learns the events sent after its creation, not the deleted model's (before
    incarnations it re-learned all of them: 110 applied for 11 sent)."""
    import learners
    from service.store import registry

    client, settings = stack
    mid = "e2e-reset"
    spec = {"id": mid, "kind": "pa", "dim": 2}
    rng = np.random.default_rng(11)

    def send(prefix: str, n: int) -> list[dict[str, Any]]:
        events = [
            {"id": f"{prefix}{i}", "x": rng.normal(size=2).tolist(), "y": float(rng.normal())}
            for i in range(n)
        ]
        assert client.post(f"/v1/models/{mid}/events", json={"events": events}).status_code == 202
        return events

    assert client.post("/v1/models", json=spec).status_code == 201
    send("old", 100)
    wait_status(client, mid, lambda s: s["applied"] == 100)
    assert client.delete(f"/v1/models/{mid}").status_code == 204

    async def registered(r: Any, keys: Any) -> list[int]:
        parts = []
        for p in range(16):
            if await r.sismember(keys.partition_models(settings.events_topic, p), mid):
                parts.append(p)
        return parts

    assert redis_call(settings, registered) == []  # a deleted model pins no partition

    created = client.post("/v1/models", json=spec)
    assert created.status_code == 201
    home = created.json()["partition"]
    assert home is not None
    stored = redis_call(settings, lambda r, k: registry.get_spec(r, k, mid))
    assert stored["origin"]["partition"] == home and stored["incarnation"]
    new = send("new", 10)
    wait_status(client, mid, lambda s: s["applied"] >= 10)
    new += send("last", 1)  # learned after anything the log holds before it
    status = wait_status(client, mid, lambda s: s["applied"] >= 11)
    assert status["applied"] == 11 and status["duplicate"] == 0

    reference = learners.build("pa", 2)
    for e in new:
        reference.learn(e["x"], e["y"])
    probe = [0.5, -0.25]
    p = client.post(f"/v1/models/{mid}/predict", json={"x": probe}).json()
    assert p["predictions"][0]["value"] == reference.predict(probe).value


def test_preprocessed_model_learns_the_bits_of_the_learner_run_directly(
    stack: tuple[TestClient, Settings],
) -> None:
    """A model with ``preprocess``: the worker's checkpoint is the bytes of the same
    learner run in-process (Welford statistics included), and the API predicts with it."""
    import learners

    client, settings = stack
    mid = "e2e-preprocessed"
    pre = {"standardize": True, "intercept": True, "clip": 4.0}
    spec = {"id": mid, "kind": "vaw", "dim": 3, "params": {"lam": 0.5}, "preprocess": pre}
    created = client.post("/v1/models", json=spec)
    assert created.status_code == 201, created.text
    assert created.json()["preprocess"] == pre
    rng = np.random.default_rng(11)
    X = np.array([100.0, 0.01, -5.0]) + np.array([10.0, 0.001, 2.0]) * rng.normal(size=(240, 3))
    y = ((X - [100.0, 0.01, -5.0]) / [10.0, 0.001, 2.0]) @ [1.0, -2.0, 0.5] + 3.0
    events = [{"id": f"p{i}", "x": X[i].tolist(), "y": float(y[i])} for i in range(len(X))]
    for i in range(0, len(events), 80):
        r = client.post(f"/v1/models/{mid}/events", json={"events": events[i : i + 80]})
        assert r.status_code == 202
    wait_status(client, mid, lambda s: s["applied"] == len(events))

    direct = learners.build("vaw", 3, preprocess=pre, lam=0.5)
    for e in events:
        direct.learn(e["x"], e["y"])
    stored = redis_call(settings, lambda r, k: r.hget(k.state(mid), "state"))
    assert stored == learners.encode_state(direct.state())
    probes = X[:5].tolist()
    served = client.post(f"/v1/models/{mid}/predict", json={"instances": probes})
    assert served.status_code == 200, served.text
    values = [p["value"] for p in served.json()["predictions"]]
    assert values == [direct.predict(p).value for p in probes]


def test_a_refused_preprocessing_step_is_a_422(stack: tuple[TestClient, Settings]) -> None:
    client, _ = stack
    for pre, words in (
        ({"standardize": True}, "portfolio weights on raw returns"),
        ({"clip": -1.0}, "greater than 0"),
        ({"center": True}, "Extra inputs are not permitted"),
    ):
        spec = {"id": "e2e-apas-pre", "kind": "apas", "dim": 3, "preprocess": pre}
        r = client.post("/v1/models", json=spec)
        assert r.status_code == 422, r.text
        assert words in r.text
    assert client.get("/v1/models/e2e-apas-pre").status_code == 404


def test_labels_of_batch_rows_are_learned_once_each(stack: tuple[TestClient, Settings]) -> None:
    """Predictions of one request share a Redis record (ids ``<batch>.<row>``): each row's
    label is learned once, a second label of a row changes nothing, and the model is the
    one learning those rows directly."""
    import learners
    from clients.batch_answer import ANSWER_CONTENT_TYPE, decode_answer
    from clients.wire import PREDICT_CONTENT_TYPE, encode_predict_batch

    client, _ = stack
    mid = "e2e-batch-rows"
    assert client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3}).status_code == 201
    X = np.random.default_rng(12).normal(size=(4, 3))
    r = client.post(
        f"/v1/models/{mid}/predict",
        content=encode_predict_batch(X),
        headers={"Content-Type": PREDICT_CONTENT_TYPE, "Accept": ANSWER_CONTENT_TYPE},
    )
    pids = [p["prediction_id"] for p in decode_answer(r.content)["predictions"]]
    url = f"/v1/models/{mid}/labels"
    for i in (2, 0, 2):
        client.post(url, json={"prediction_id": pids[i], "y": float(i) + 1.0})
    again = client.post(url, json={"prediction_id": pids[0], "y": 5.0}).json()
    assert again["status"] == "duplicate"
    status = wait_status(client, mid, lambda s: s["applied"] == 2)
    replay = learners.build("pa", 3)
    replay.learn(X[2].tolist(), 3.0)
    replay.learn(X[0].tolist(), 1.0)
    probe = [0.3, 0.2, -0.1]
    after = client.post(f"/v1/models/{mid}/predict", json={"x": probe}).json()
    assert after["model_version"] == status["version"]
    assert after["predictions"][0]["value"] == replay.predict(probe).value
