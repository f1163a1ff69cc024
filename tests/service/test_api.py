"""HTTP API contract against a real Redis and a real Kafka-compatible broker (docs/design.md,
"HTTP API"): every endpoint, every error code, never a 500 on user input."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import numpy as np
import pytest
from fastapi import Request
from fastapi.testclient import TestClient

import learners
from clients.batch_answer import parse_prediction_id
from service.api import create_app
from service.config import Settings
from service.metrics.running import RunningStats
from tests.service._api_helpers import (
    events_for,
    pa_with_weights,
    record_of,
    redis_call,
    write_state,
)

pytestmark = pytest.mark.service


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(max_batch=50, max_dim=1000)


# a model's ``status`` before its first checkpoint
NO_CHECKPOINT = {
    "version": 0,
    "applied": 0,
    "duplicate": 0,
    "rejected": 0,
    "discarded": 0,
    "updated_at": None,
    "halted": None,
    "refusing": False,
    "refused_share": None,
}


def new_id(prefix: str = "m") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create(client: TestClient, kind: str = "pa", dim: int = 3, **extra: Any) -> str:
    mid = extra.pop("id", None) or new_id(kind)
    r = client.post("/v1/models", json={"id": mid, "kind": kind, "dim": dim, **extra})
    assert r.status_code == 201, r.text
    return mid


def needs(kind: str) -> None:
    if kind not in learners.REGISTRY:
        pytest.skip(f"learner kind {kind!r} is not installed")


# ---- health --------------------------------------------------------------------------------
def test_healthz_and_readyz(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200, r.text
    assert r.json() == {"status": "ready"}  # open: the details go to the log only


# ---- models --------------------------------------------------------------------------------
def test_model_crud(client: TestClient) -> None:
    mid = create(client, params={"variant": "pa2", "C": 0.5})
    r = client.get(f"/v1/models/{mid}")
    assert r.status_code == 200
    body = r.json()
    assert body["kind"] == "pa" and body["dim"] == 3 and body["task"] == "regression"
    assert body["params"] == {"variant": "pa2", "C": 0.5}
    assert body["partition"] is not None  # its home partition, where its marker went
    assert body["status"] == NO_CHECKPOINT
    assert mid in [m["id"] for m in client.get("/v1/models").json()["models"]]

    dup = client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 5})
    assert dup.status_code == 409 and "already exists" in dup.json()["detail"]

    assert client.delete(f"/v1/models/{mid}").status_code == 204
    assert client.get(f"/v1/models/{mid}").status_code == 404
    assert client.delete(f"/v1/models/{mid}").status_code == 404
    assert mid not in [m["id"] for m in client.get("/v1/models").json()["models"]]


def test_model_list_carries_each_models_checkpoint_status(
    client: TestClient, api_settings: Settings
) -> None:
    fresh, learned = create(client), create(client)
    before = time.time()
    write_state(api_settings, learned, learners.REGISTRY["pa"](3), 0, offset=7, applied=8)
    listed = {m["id"]: m["status"] for m in client.get("/v1/models").json()["models"]}
    assert listed[fresh] == NO_CHECKPOINT
    status = listed[learned]
    assert status["version"] == 1 and status["applied"] == 8
    assert before - 1 <= status["updated_at"] <= time.time() + 1
    assert client.get(f"/v1/models/{learned}").json()["status"] == status


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"kind": "no-such-kind", "dim": 3}, "unknown kind 'no-such-kind'"),
        ({"kind": "pa", "dim": 3, "params": {"C": -1.0}}, "'C'"),
        ({"kind": "pa", "dim": 3, "params": {"variant": "pa9"}}, "variant"),
        ({"kind": "pa", "dim": 3, "params": {"bogus": 1}}, "unknown parameter"),
        ({"kind": "pa", "dim": 3, "params": {"C": [1, 2]}}, "C"),
        ({"kind": "pa", "dim": 0}, "dim"),
        ({"kind": "pa", "dim": 5000}, "limit of 1000"),
        ({"kind": "pa", "dim": 2, "assets": ["A"]}, "assets must name all 2"),
        ({"kind": "pa", "dim": 2, "assets": ["A", "A"]}, "unique"),
        ({"kind": "pa", "dim": 2, "features": ["A"]}, "features must name all 2"),
        ({"kind": "pa", "dim": 2, "features": ["A", "A"]}, "unique"),
        ({"kind": "pa", "dim": 2, "features": ["A", ""]}, "features[1]"),
        ({"kind": "pa", "dim": 2, "features": ["A", "B"], "assets": ["B", "A"]}, "differ"),
        ({"kind": "pa"}, "dim"),
    ],
)
def test_create_model_bad_spec_is_readable_422(
    client: TestClient, spec: dict[str, Any], needle: str
) -> None:
    r = client.post("/v1/models", json={"id": new_id(), **spec})
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]


@pytest.mark.parametrize("bad_id", ["a{b}", "has space", "x:y", "", "-lead", "a" * 200])
def test_create_model_bad_id_is_422(client: TestClient, bad_id: str) -> None:
    r = client.post("/v1/models", json={"id": bad_id, "kind": "pa", "dim": 2})
    assert r.status_code == 422 and r.json()["detail"].startswith("id")


def test_unknown_model_is_404_everywhere(client: TestClient) -> None:
    mid = new_id("ghost")
    x = {"x": [0.0, 0.0, 0.0]}
    for method, path, body in [
        ("get", f"/v1/models/{mid}", None),
        ("post", f"/v1/models/{mid}/predict", x),
        ("post", f"/v1/models/{mid}/events", {"events": [x]}),
        ("post", f"/v1/models/{mid}/labels", {"prediction_id": "p", "y": 1.0}),
        ("post", f"/v1/models/{mid}/quantify", {"instances": [[0.0]]}),
        ("get", f"/v1/models/{mid}/portfolio", None),
        ("post", f"/v1/models/{mid}/blocks", {"vectors": [[0.0]]}),
    ]:
        r = client.request(method, path, json=body)
        assert r.status_code == 404, (path, r.text)
        assert mid in r.json()["detail"]


# ---- predict -------------------------------------------------------------------------------
def test_predict_fresh_model_single_and_batch(client: TestClient) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 2.0, 3.0]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model_version"] == 0
    (p,) = body["predictions"]
    assert p["value"] == 0.0  # w starts at zero
    assert parse_prediction_id(p["prediction_id"]) == (p["prediction_id"][:32], 0)

    r = client.post(f"/v1/models/{mid}/predict", json={"instances": [[1, 0, 0], [0, 1, 0]]})
    ids = [p["prediction_id"] for p in r.json()["predictions"]]
    assert r.status_code == 200 and len(ids) == 2 and len(set(ids)) == 2


def test_predict_serves_latest_checkpoint_and_refreshes_on_new_version(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    x = [1.0, 2.0, 3.0]
    v1 = write_state(api_settings, mid, pa_with_weights([1.0, 0.0, 0.0]), 0, offset=0)
    r = client.post(f"/v1/models/{mid}/predict", json={"x": x}).json()
    assert r["model_version"] == v1 == 1 and r["predictions"][0]["value"] == 1.0
    # Served from the cache while the version is unchanged, then refreshed when it moves.
    assert client.post(f"/v1/models/{mid}/predict", json={"x": x}).json()["model_version"] == 1
    v2 = write_state(api_settings, mid, pa_with_weights([0.0, 1.0, 1.0]), v1, offset=5)
    r = client.post(f"/v1/models/{mid}/predict", json={"x": x}).json()
    assert r["model_version"] == v2 == 2
    assert r["predictions"][0]["value"] == 5.0
    batch = client.post(f"/v1/models/{mid}/predict", json={"instances": [x, [1, 1, 1]]}).json()
    assert [p["value"] for p in batch["predictions"]] == [5.0, 2.0]


def test_predict_stores_features_with_ttl(client: TestClient, api_settings: Settings) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/predict", json={"x": [0.5, -1.0, 2.0], "hint": 0.25})
    pid = r.json()["predictions"][0]["prediction_id"]

    async def read(redis, keys):  # type: ignore[no-untyped-def]
        key, _ = record_of(keys, mid, pid)
        return await redis.hgetall(key), await redis.ttl(key)

    stored, ttl = redis_call(api_settings, read)
    # one record per request: x and the hint as float64 bytes (little-endian; the label
    # route reads the same floats back)
    assert stored[b"xf64"] == np.array([0.5, -1.0, 2.0], dtype="<f8").tobytes()
    assert stored[b"hf64"] == np.array([0.25], dtype="<f8").tobytes() and stored[b"n"] == b"1"
    assert stored[b"v"] == str(r.json()["model_version"]).encode()
    assert 0 < ttl <= api_settings.prediction_ttl_s


def test_predict_stores_integers_as_floats_in_both_paths(
    client: TestClient, api_settings: Settings
) -> None:
    """The fast path (plain numbers) and the validated path (here: a numeric string, which
    pydantic converts) store the same floats as before: ints become floats."""
    mid = create(client)
    fast = client.post(f"/v1/models/{mid}/predict", json={"instances": [[1, 2, 3]], "hints": [2]})
    slow = client.post(f"/v1/models/{mid}/predict", json={"x": ["1", 2, 3], "hint": 2})
    assert fast.status_code == slow.status_code == 200, (fast.text, slow.text)
    pids = [r.json()["predictions"][0]["prediction_id"] for r in (fast, slow)]

    async def read(redis, keys):  # type: ignore[no-untyped-def]
        return [await redis.hmget(record_of(keys, mid, p)[0], ["xf64", "hf64"]) for p in pids]

    for x, hint in redis_call(api_settings, read):
        assert x == np.array([1.0, 2.0, 3.0], dtype="<f8").tobytes()
        assert hint == np.array([2.0], dtype="<f8").tobytes()


def test_predict_follows_a_changed_spec_and_a_deleted_model(client: TestClient) -> None:
    """The API process remembers the spec it checked requests against; Redis stores the
    predictions only while that spec is current, so a re-created model is never served
    with (or checked against) the old one."""
    mid = create(client, dim=3)
    assert client.post(f"/v1/models/{mid}/predict", json={"x": [1, 2, 3]}).status_code == 200
    assert client.delete(f"/v1/models/{mid}").status_code == 204
    r = client.post(f"/v1/models/{mid}/predict", json={"x": [1, 2, 3]})
    assert r.status_code == 404 and mid in r.json()["detail"]
    create(client, dim=2, id=mid)
    r = client.post(f"/v1/models/{mid}/predict", json={"x": [1, 2, 3]})
    assert r.status_code == 422 and "dimension 2" in r.json()["detail"], r.text
    r = client.post(f"/v1/models/{mid}/predict", json={"instances": [[1, 2], [3, 4]]})
    assert r.status_code == 200 and len(r.json()["predictions"]) == 2


@pytest.mark.parametrize(
    "body",
    [
        {"x": [1, 2.5, -3]},
        {"x": [1, 2.5, -3], "hint": 0.5},
        {"x": [1, 2.5, -3], "hint": None},
        {"instances": [[1, 2.5, -3], [0, 0, 1]]},
        {"instances": [[1, 2.5, -3], [0, 0, 1]], "hints": [None, 2]},
    ],
)
def test_predict_fast_and_validated_paths_agree(
    client: TestClient, api_settings: Settings, body: dict[str, Any]
) -> None:
    """A plain JSON body takes the fast path; the same body with its numbers written as
    strings goes through pydantic (which converts them): same answers."""
    mid = create(client)
    write_state(api_settings, mid, pa_with_weights([1.0, -2.0, 0.5]), 0, offset=0)
    fast = client.post(f"/v1/models/{mid}/predict", json=body)
    key = "x" if "x" in body else "instances"
    slow_body = dict(body)
    if key == "x":
        slow_body["x"] = [str(v) for v in body["x"]]
    else:
        slow_body["instances"] = [[str(v) for v in row] for row in body["instances"]]
    slow = client.post(f"/v1/models/{mid}/predict", json=slow_body)
    assert fast.status_code == slow.status_code == 200, (fast.text, slow.text)
    f, s = fast.json(), slow.json()
    assert f["model_version"] == s["model_version"] == 1
    assert [p["value"] for p in f["predictions"]] == [p["value"] for p in s["predictions"]]


@pytest.mark.parametrize(
    "body",
    [
        {"x": [True, 2, 3]},
        {"x": [1, 2, 3], "hint": True},
        {"x": [1, 2, 3], "hint": "0.5"},
        {"x": None, "instances": [[1, 2, 3]]},
        {"instances": [[1, 2, 3]], "hints": None},
        {"instances": [[1, 2, 3]], "hints": [True]},
        {"x": [1, 2, 3], "instances": None},
        {"x": [1, 2, 3], "hints": [1]},
        {"instances": [[1, 2, 3], "a"]},
        {"instances": [[]]},
        {"x": []},
        [1, 2, 3],
        "x",
    ],
)
def test_predict_unusual_bodies_answer_as_pydantic_says(client: TestClient, body: Any) -> None:
    """Bodies the fast path does not take go to the validated handler: whatever the
    outcome, it is a 200 or a readable 422, never a 500."""
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/predict", json=body)
    assert r.status_code in (200, 422), r.text
    if r.status_code == 422:
        assert isinstance(r.json()["detail"], str) and r.json()["detail"]


def test_predict_stores_the_version_that_served_it(api_settings: Settings) -> None:
    """When a newer checkpoint lands between the version read and the learner load, the
    stored predictions carry the version of the learner that made them."""
    from starlette.concurrency import run_in_threadpool

    from service.api.deps import get_cache
    from service.api.serving import ModelCache

    class Late(ModelCache):
        async def get(self, spec, version=None, token=None):  # type: ignore[no-untyped-def]
            # The worker writes checkpoint version+1 right after the version was read.
            weights = pa_with_weights([0.0, 0.0, 1.0])
            await run_in_threadpool(write_state, api_settings, spec.id, weights, version, 1)
            return await super().get(spec)

    async def late_cache(request: Request) -> ModelCache:
        return Late(request.state.store)

    app = create_app(api_settings)
    app.dependency_overrides[get_cache] = late_cache
    with TestClient(app) as c:
        mid = create(c)
        v1 = write_state(api_settings, mid, pa_with_weights([1.0, 0.0, 0.0]), 0, offset=0)
        r = c.post(f"/v1/models/{mid}/predict", json={"x": [1, 2, 3]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model_version"] == v1 + 1 and body["predictions"][0]["value"] == 3.0
        pid = body["predictions"][0]["prediction_id"]

    async def read(redis, keys):  # type: ignore[no-untyped-def]
        return await redis.hget(record_of(keys, mid, pid)[0], "v")

    assert redis_call(api_settings, read) == str(v1 + 1).encode()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"x": [1.0, 2.0]}, "dimension 3"),
        ({"instances": [[1, 2, 3], [1, 2]]}, "instances[1] must have dimension 3"),
        ({"x": [1.0, 2.0, "a"]}, "x[2]"),
        ({"x": [1.0, 2.0, 3.0], "instances": [[1, 2, 3]]}, "exactly one"),
        ({}, "exactly one"),
        ({"instances": []}, "must not be empty"),
        ({"instances": [[0, 0, 0]] * 51}, "at most 50"),
        ({"instances": [[0, 0, 0]], "hints": [1, 2]}, "one entry per instance"),
        ({"x": [1, 2, 3], "extra": 1}, "extra"),
    ],
)
def test_predict_bad_input_is_readable_422(
    client: TestClient, body: dict[str, Any], needle: str
) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/predict", json=body)
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_predict_non_finite_is_422(client: TestClient, literal: str) -> None:
    mid = create(client)
    raw = '{"x": [1.0, ' + literal + ", 3.0]}"
    r = client.post(
        f"/v1/models/{mid}/predict", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert "finite" in r.json()["detail"]


def test_malformed_json_is_422(client: TestClient) -> None:
    mid = create(client)
    r = client.post(
        f"/v1/models/{mid}/predict",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and "JSON" in r.json()["detail"]


def test_classifier_predict_gives_label_and_scores(client: TestClient) -> None:
    needs("pa-classifier")
    mid = create(client, kind="pa-classifier", dim=2)
    r = client.post(f"/v1/models/{mid}/predict", json={"x": [1.0, -1.0]})
    assert r.status_code == 200, r.text
    p = r.json()["predictions"][0]
    assert p["value"] in (-1, 1) and p["scores"]


@pytest.mark.parametrize("params", [{}, {"classes": ["a", "b", "c"]}])
def test_classifier_predict_gives_class_probabilities(  # type: ignore[no-untyped-def]
    client: TestClient, api_settings: Settings, params
) -> None:
    """Each prediction carries the learner's predict_proba (labels as strings), summing to
    1, from the checkpoint that serves it (docs/probabilities.md)."""
    mid = create(client, kind="arow", dim=3, params=params)
    learner = learners.build("arow", 3, **params)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    labels = params.get("classes", [-1, 1])
    learner.learn_many(X, [labels[int(i) % len(labels)] for i in np.argmax(X, axis=1)])
    write_state(api_settings, mid, learner, expected_version=0, offset=40)
    rows = X[:5].tolist()
    r = client.post(f"/v1/models/{mid}/predict", json={"instances": rows})
    assert r.status_code == 200, r.text
    preds = r.json()["predictions"]
    for p, proba in zip(preds, learner.predict_proba_many(rows), strict=True):
        assert p["probabilities"] == {str(c): q for c, q in proba.items()}
        assert sum(p["probabilities"].values()) == pytest.approx(1.0, abs=1e-12)
        assert str(p["value"]) in p["probabilities"]


def test_regressor_predict_gives_no_probabilities(client: TestClient) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/predict", json={"instances": [[1.0, 0.0, 2.0]] * 3})
    assert r.status_code == 200, r.text
    assert all("probabilities" not in p for p in r.json()["predictions"])


# ---- events --------------------------------------------------------------------------------
def test_events_are_produced_keyed_by_model(client: TestClient, api_settings: Settings) -> None:
    mid = create(client)
    events = [
        {"id": "e-1", "x": [1.0, 2.0, 3.0], "y": 0.5, "ts": 1700000000.0},
        {"x": [0.1, 0.2, 0.3]},
        {"id": "e-3", "x": [1, 1, 1], "y": -2, "hint": 0.3},
    ]
    r = client.post(f"/v1/models/{mid}/events", json={"events": events})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["accepted"] == 3 and body["ids"][0] == "e-1" and body["ids"][2] == "e-3"
    assigned = body["ids"][1]
    assert len(assigned) == 32

    got = events_for(api_settings, mid, lambda f: len(f) >= 3)
    assert [e["id"] for e in got] == ["e-1", assigned, "e-3"]
    assert len({e["_partition"] for e in got}) == 1  # one key, one partition: one writer
    first, second, third = got
    assert first["model"] == mid and first["x"] == [1.0, 2.0, 3.0] and first["y"] == 0.5
    assert first["ts"] == 1700000000.0 and "hint" not in first
    assert second["y"] is None and isinstance(second["ts"], float)
    assert third["y"] == -2 and third["hint"] == 0.3


@pytest.mark.parametrize(
    ("events", "needle"),
    [
        ([{"x": [1.0, 2.0]}], "events[0] must have dimension 3"),
        ([{"x": [1, 2, 3]}, {"x": [1, 2, 3, 4]}], "events[1]"),
        ([{"x": [1, 2, 3], "y": "abc"}], "y"),
        ([], "events"),
        ([{"x": [1, 2, 3]}] * 51, "at most 50"),
        ([{"id": "", "x": [1, 2, 3]}], "id"),
    ],
)
def test_events_bad_input_is_422_and_nothing_is_produced(
    client: TestClient, api_settings: Settings, events: list[dict[str, Any]], needle: str
) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/events", json={"events": events})
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"]


def test_events_with_nan_label_produce_nothing(client: TestClient, api_settings: Settings) -> None:
    mid = create(client)
    raw = '{"events": [{"id": "good", "x": [1, 2, 3], "y": 1.0}, {"x": [1, 2, 3], "y": NaN}]}'
    r = client.post(
        f"/v1/models/{mid}/events", content=raw, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and "finite" in r.json()["detail"]
    # A marker sent afterwards is the first thing on the model's partition: the bad batch,
    # good event included, never reached Kafka.
    client.post(f"/v1/models/{mid}/events", json={"events": [{"id": "marker", "x": [0, 0, 0]}]})
    got = events_for(api_settings, mid, lambda f: any(e["id"] == "marker" for e in f))
    assert [e["id"] for e in got] == ["marker"]


def test_classifier_events_check_the_label(client: TestClient) -> None:
    needs("pa-classifier")
    mid = create(client, kind="pa-classifier", dim=2)
    r = client.post(f"/v1/models/{mid}/events", json={"events": [{"x": [1, 2], "y": 0.5}]})
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith("events[0].y")
    ok = client.post(f"/v1/models/{mid}/events", json={"events": [{"x": [1, 2], "y": -1}]})
    assert ok.status_code == 202


# ---- labels --------------------------------------------------------------------------------
def test_label_is_joined_once(client: TestClient, api_settings: Settings) -> None:
    mid = create(client)
    x = [0.25, -0.5, 4.0]
    pid = client.post(f"/v1/models/{mid}/predict", json={"x": x, "hint": 0.1}).json()[
        "predictions"
    ][0]["prediction_id"]
    r = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 1.5})
    assert r.status_code == 202, r.text
    assert r.json() == {"status": "accepted", "event_id": f"label:{pid}"}
    again = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 9.0})
    assert again.status_code == 202
    assert again.json() == {"status": "duplicate", "event_id": f"label:{pid}"}

    client.post(f"/v1/models/{mid}/events", json={"events": [{"id": "marker", "x": [0, 0, 0]}]})
    got = events_for(api_settings, mid, lambda f: any(e["id"] == "marker" for e in f))
    labelled = [e for e in got if e["id"] == f"label:{pid}"]
    assert len(labelled) == 1
    (e,) = labelled
    assert e["x"] == x and e["y"] == 1.5 and e["hint"] == 0.1 and e["prediction_id"] == pid


def test_label_joins_its_row_of_a_batch_and_a_record_stored_as_json(
    client: TestClient, api_settings: Settings
) -> None:
    """Each prediction of a batch keeps its own row and hint (the rows go to Redis as one
    block); a record in the layout before ``xf64`` (``x`` as JSON) still joins its label."""
    mid = create(client)
    rows = np.random.default_rng(3).normal(size=(5, 3)).tolist()
    hints = [None, 0.5, None, -1.25, None]
    body = {"instances": rows, "hints": hints}
    pids = [
        p["prediction_id"]
        for p in client.post(f"/v1/models/{mid}/predict", json=body).json()["predictions"]
    ]
    legacy = "legacy-prediction"

    async def write_legacy(redis, keys):  # type: ignore[no-untyped-def]
        key = keys.prediction(mid, legacy)
        await redis.hset(key, mapping={"x": "[1.5,-2.0,0.25]", "hint": "0.75", "v": "0", "ts": "1"})
        await redis.expire(key, 60)

    redis_call(api_settings, write_legacy)
    for pid in [pids[1], pids[4], legacy]:
        r = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 2.0})
        assert r.status_code == 202 and r.json()["status"] == "accepted", r.text
    client.post(f"/v1/models/{mid}/events", json={"events": [{"id": "marker", "x": [0, 0, 0]}]})
    got = events_for(api_settings, mid, lambda f: any(e["id"] == "marker" for e in f))
    joined = {e["prediction_id"]: (e["x"], e.get("hint")) for e in got if "prediction_id" in e}
    assert joined == {
        pids[1]: (rows[1], 0.5),
        pids[4]: (rows[4], None),
        legacy: ([1.5, -2.0, 0.25], 0.75),
    }


def test_label_for_unknown_or_expired_prediction_is_404(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    r = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": "nope", "y": 1.0})
    assert r.status_code == 404 and "nope" in r.json()["detail"]

    pid = client.post(f"/v1/models/{mid}/predict", json={"x": [1, 2, 3]}).json()["predictions"][0][
        "prediction_id"
    ]

    async def expire(redis, keys):  # type: ignore[no-untyped-def]
        key, _ = record_of(keys, mid, pid)
        await redis.pexpire(key, 1)
        while await redis.exists(key):  # expired once 1 ms has passed
            await asyncio.sleep(0.002)

    redis_call(api_settings, expire)
    r = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 1.0})
    assert r.status_code == 404
    # A prediction of another model does not join either.
    other = create(client)
    r = client.post(f"/v1/models/{other}/labels", json={"prediction_id": pid, "y": 1.0})
    assert r.status_code == 404


def test_label_bad_value_is_422_and_does_not_consume_the_prediction(client: TestClient) -> None:
    mid = create(client)
    pid = client.post(f"/v1/models/{mid}/predict", json={"x": [1, 2, 3]}).json()["predictions"][0][
        "prediction_id"
    ]
    r = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": "high"})
    assert r.status_code == 422
    r = client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": 2.0})
    assert r.status_code == 202 and r.json()["status"] == "accepted"


# ---- task-specific endpoints ---------------------------------------------------------------
def test_capabilities_are_409_for_other_learners(client: TestClient) -> None:
    mid = create(client)
    for method, path, body, needle in [
        ("post", "quantify", {"instances": [[1, 2, 3]]}, "quantification"),
        ("get", "portfolio", None, "portfolios"),
        ("post", "blocks", {"vectors": [[1, 2, 3]]}, "block registration"),
    ]:
        r = client.request(method, f"/v1/models/{mid}/{path}", json=body)
        assert r.status_code == 409, r.text
        detail = r.json()["detail"]
        assert needle in detail and "'pa'" in detail and "kinds that do" in detail


def test_quantify(client: TestClient) -> None:
    needs("nemsis")
    mid = create(client, kind="nemsis", dim=2)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2)).tolist()
    r = client.post(f"/v1/models/{mid}/quantify", json={"instances": X, "method": "cc"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert 0.0 <= body["prevalence"] <= 1.0 and body["n"] == 20 and body["model_version"] == 0
    assert body["method"] == "cc"
    default = client.post(f"/v1/models/{mid}/quantify", json={"instances": X})
    assert default.status_code == 200 and default.json()["method"] == "pacc"  # docs/design.md
    bad = client.post(f"/v1/models/{mid}/quantify", json={"instances": X, "method": "magic"})
    assert bad.status_code == 422 and "magic" in bad.json()["detail"]
    wrong = client.post(f"/v1/models/{mid}/quantify", json={"instances": [[1, 2, 3]]})
    assert wrong.status_code == 422 and "dimension 2" in wrong.json()["detail"]


def test_portfolio_by_asset_name(client: TestClient) -> None:
    needs("apas")
    assets = ["AAA", "BBB", "CCC", "DDD"]
    mid = create(client, kind="apas", dim=4, assets=assets)
    r = client.get(f"/v1/models/{mid}/portfolio", params={"top": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body["weights"]) == assets and body["model_version"] == 0
    fresh = learners.build("apas", 4)
    assert list(body["weights"].values()) == [float(v) for v in fresh.weights]  # type: ignore[attr-defined]
    assert len(body["top"]) == 2
    unnamed = create(client, kind="apas", dim=3)
    assert list(client.get(f"/v1/models/{unnamed}/portfolio").json()["weights"]) == [
        "x0",
        "x1",
        "x2",
    ]


def test_blocks_become_a_register_control_event(client: TestClient, api_settings: Settings) -> None:
    needs("transductive")
    mid = create(client, kind="transductive", dim=2)
    vectors = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    r = client.post(f"/v1/models/{mid}/blocks", json={"id": "block-1", "vectors": vectors})
    assert r.status_code == 202, r.text
    assert r.json()["event_id"] == "block-1" and r.json()["T"] == 3
    got = events_for(api_settings, mid, lambda f: len(f) >= 1)
    (e,) = got
    assert e["type"] == "register" and e["id"] == "block-1" and e["vectors"] == vectors
    assert e["model"] == mid
    bad = client.post(f"/v1/models/{mid}/blocks", json={"vectors": [[1.0, 2.0, 3.0]]})
    assert bad.status_code == 422 and "dimension 2" in bad.json()["detail"]


# ---- metrics -------------------------------------------------------------------------------
def test_metrics_show_model_counters_deadletters_and_latency(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    write_state(api_settings, mid, pa_with_weights([0.0, 0.0, 0.0]), 0, offset=6, applied=7)

    async def deadletters(redis, keys):  # type: ignore[no-untyped-def]
        await redis.set(keys.deadletter_count(), 4)

    redis_call(api_settings, deadletters)
    client.get(f"/v1/models/{mid}")
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert f'onlinepredict_events_total{{model="{mid}",outcome="applied"}} 7.0' in text
    assert f'onlinepredict_events_total{{model="{mid}",outcome="duplicate"}} 0.0' in text
    assert "onlinepredict_deadletter_total 4.0" in text
    assert 'route="/v1/models/{model_id}"' in text
    assert "onlinepredict_http_request_duration_seconds_bucket" in text
    assert "onlinepredict_api_redis_up 1.0" in text


def test_metrics_show_the_checkpointed_running_statistics(
    client: TestClient, api_settings: Settings
) -> None:
    mid = create(client)
    stats = RunningStats("regression", 3)
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = rng.normal(size=3)
        stats.update(x, float(x.sum()), 0.0, float(x.sum()) ** 2, {})
    blob = learners.encode_state(stats.state())
    write_state(api_settings, mid, pa_with_weights([0.0] * 3), 0, offset=4, applied=5, stats=blob)
    text = client.get("/metrics").text
    loss = stats.figures()["cumulative_loss"]
    assert f'onlinepredict_cumulative_loss{{model="{mid}"}} {loss!r}' in text
    assert f'onlinepredict_cumulative_regret{{model="{mid}"}}' in text


# ---- OpenAPI -------------------------------------------------------------------------------
def test_openapi_is_complete(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    expected = {
        ("/v1/models", "post"),
        ("/v1/models", "get"),
        ("/v1/models/{model_id}", "get"),
        ("/v1/models/{model_id}", "delete"),
        ("/v1/models/{model_id}/predict", "post"),
        ("/v1/models/{model_id}/events", "post"),
        ("/v1/models/{model_id}/labels", "post"),
        ("/v1/models/{model_id}/quantify", "post"),
        ("/v1/models/{model_id}/portfolio", "get"),
        ("/v1/models/{model_id}/blocks", "post"),
        ("/v1/models/{model_id}/checkpoints", "get"),
        ("/v1/models/{model_id}/deadletters", "get"),
        ("/v1/models/{model_id}/rollback", "post"),
        ("/v1/models/{model_id}/series", "get"),
        ("/v1/models/{model_id}/metrics", "get"),
        ("/v1/models/{model_id}/figures", "get"),  # the deprecated name of /metrics
        ("/healthz", "get"),
        ("/readyz", "get"),
        ("/metrics", "get"),
    }
    assert {(p, m) for p, ops in paths.items() for m in ops} == expected
    op_ids = [op["operationId"] for ops in paths.values() for op in ops.values()]
    assert len(set(op_ids)) == len(op_ids)
    assert "models-create_model" in op_ids and "predict-predict" in op_ids
    for path, ops in paths.items():
        for op in ops.values():
            assert op.get("summary") and op.get("description"), path
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body and "$ref" in body["schema"]:
                ref = body["schema"]["$ref"]
                schema = spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]
                assert schema.get("examples"), ref
            if path.startswith("/v1/models/{model_id}"):
                assert "404" in op["responses"], path
    assert "APIKeyHeader" in spec["components"]["securitySchemes"]
    assert paths["/v1/models/{model_id}/figures"]["get"]["deprecated"] is True


def test_openapi_describes_each_kinds_hyperparameters(client: TestClient) -> None:
    """The create body is a union on ``kind``, one variant per registered learner, each
    with the learner's own parameter declaration (names, bounds, defaults)."""
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/v1/models"]["post"]["requestBody"]["content"]["application/json"]
    union = body["schema"]
    assert union["discriminator"]["propertyName"] == "kind"
    mapping = union["discriminator"]["mapping"]
    assert set(mapping) == set(learners.REGISTRY)
    assert len(union["oneOf"]) == len(learners.REGISTRY)
    for kind, ref in mapping.items():
        variant = spec["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        assert variant["properties"]["kind"]["const"] == kind
        params = variant["properties"]["params"]
        assert list(params["properties"]) == learners.REGISTRY[kind].param_names()
        assert params["additionalProperties"] is False
    pa = spec["components"]["schemas"][mapping["pa"].rsplit("/", 1)[-1]]["properties"]
    assert pa["params"]["properties"]["C"] == {
        "type": "number",
        "exclusiveMinimum": 0.0,
        "description": "must be a real number in (0.0, inf]",
        "default": 1.0,
    }
    assert pa["params"]["properties"]["variant"]["enum"] == ["pa", "pa1", "pa2"]
    # the typed figures of GET /v1/models/{id}/metrics
    out = spec["paths"]["/v1/models/{model_id}/metrics"]["get"]["responses"]["200"]
    assert out["content"]["application/json"]["schema"]["$ref"].endswith("/FiguresOut")
    figures = spec["components"]["schemas"]["ModelFigures"]["properties"]
    assert {"cumulative_loss", "cumulative_regret", "rmse", "error_rate"} <= set(figures)


@pytest.mark.parametrize(
    ("raw", "plain"),
    [
        (b'{"x": [1, 2.5, -3]}', True),
        (b'{"x": [1, 2.5, -3], "hint": 0.5}', True),
        (b'{"instances": [[1, 2], [3, 4]], "hints": [null, 1]}', True),
        (b'{"instances": [[1, 2], [3]]}', True),  # ragged: the dimension check answers
        (b'{"x": [1, 1e999]}', False),
        (b'{"x": [1, NaN]}', False),
        (b'{"x": [true, 2]}', False),
        (b'{"x": ["1", 2]}', False),
        (b'{"x": [1, 2], "extra": 1}', False),
        (b'{"x": [1, 2], "hints": [1]}', False),
        (b'{"instances": [[1, 2]], "hint": 1}', False),
        (b'{"instances": [[1, 2]], "hints": [1, 2]}', False),
        (b'{"x": []}', False),
        (b"{not json", False),
        (b"[1, 2]", False),
    ],
)
def test_which_bodies_take_the_fast_path(raw: bytes, plain: bool) -> None:
    """The fast path takes only bodies pydantic would accept unchanged (ints aside); the
    rest reach the validated handler and its messages."""
    from starlette.requests import Request as StarletteRequest

    from service.api.routes.predict import _plain_request

    scope = {"type": "http", "headers": [(b"content-type", b"application/json")]}
    assert (_plain_request(StarletteRequest(scope), raw) is not None) == plain
    other = {"type": "http", "headers": [(b"content-type", b"text/plain")]}
    assert _plain_request(StarletteRequest(other), raw) is None
