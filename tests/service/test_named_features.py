"""Named features (docs/events.md §1): a model created with ``features`` takes ``x`` as an
object ``{name: value}``, missing names 0, over HTTP and from any Kafka producer, and learns
from it exactly what it learns from the list form.

Unit tests of the decoder and the mapping, then the API with a real worker process (real
broker, real Redis): events and predictions with named x, raw Kafka records with named x, an
unknown name as a 422 and as a dead letter with the reason.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import learners
from clients import wire
from service.config import Settings
from service.store.checkpoints import StoredState, read_state
from service.worker.events import InvalidEvent, decode_event
from service.worker.runtime import APPLIED, REJECTED, ModelRuntime
from tests.service._api_helpers import api_and_worker, redis_call
from tests.service.conftest import produce, read_topic
from tests.service.test_api_worker import wait_status

FEATURES = ["a", "b", "c", "d"]
W = np.array([1.0, -2.0, 0.5, 0.0])


def _named(row: np.ndarray, *, sparse: bool = True) -> dict[str, float]:
    """``row`` as an object; ``sparse``: zeros left out (missing names are 0), in a shuffled
    order (an object's order means nothing)."""
    pairs = [(n, float(v)) for n, v in zip(FEATURES, row, strict=True) if v or not sparse]
    return dict(reversed(pairs))


def _rows(seed: int, n: int) -> np.ndarray:
    X = np.random.default_rng(seed).normal(size=(n, len(FEATURES)))
    X[::3, 1] = 0.0  # some names missing from the objects
    return X


# --- decoding and mapping -----------------------------------------------------------------
def _decode(x: Any, model: str = "m") -> Any:
    value = json.dumps({"model": model, "id": "e1", "x": x, "y": 1.0}, allow_nan=True).encode()
    return decode_event(model.encode(), value)


def test_decode_keeps_an_object_x_for_the_runtime() -> None:
    assert _decode({"b": 2, "a": 1.5}).x == {"b": 2, "a": 1.5}
    assert _decode({}).x == {}  # every name missing: the zero vector
    assert _decode([1, 2.5]).x == [1, 2.5]  # the list form as before


@pytest.mark.parametrize(
    ("x", "needle"),
    [
        ({"a": "1"}, "map names to numbers"),
        ({"a": True}, "map names to numbers"),
        ({"a": [1]}, "map names to numbers"),
        ({"a": float("nan")}, "finite"),
        ({"a": 1e200}, "within ±1e+150"),
        ("abc", "or an object"),
        ([], "non-empty list"),
    ],
)
def test_decode_refuses_bad_object_values(x: Any, needle: str) -> None:
    with pytest.raises(InvalidEvent) as exc:
        _decode(x)
    assert needle in exc.value.reason


def test_dense_maps_by_name_and_names_unknown_ones() -> None:
    index = wire.feature_index(FEATURES)
    assert wire.dense({"d": 4.0, "a": 1.0}, index) == [1.0, 0.0, 0.0, 4.0]
    assert wire.dense({}, index) == [0.0] * 4
    with pytest.raises(ValueError, match=r"unknown features 'zz', 'yy' \(features: 'a', 'b'"):
        wire.dense({"a": 1.0, "zz": 2.0, "yy": 3.0}, index)


def _runtime(features: list[str] | None = FEATURES) -> ModelRuntime:
    spec = {"id": "m", "kind": "pa", "dim": 4, "params": {"C": 1.0}, "features": features}
    return ModelRuntime.create(spec, None, [], seen_keep=100)


def _learned(rt: ModelRuntime) -> tuple[bytes, bytes]:
    cp = rt.checkpoint_write("t")
    return cp.state, cp.stats


def _events(X: np.ndarray, named: bool) -> list[Any]:
    out = []
    for i, row in enumerate(X):
        x = _named(row) if named else row.tolist()
        value = json.dumps({"model": "m", "id": f"e{i}", "x": x, "y": float(row @ W)}).encode()
        out.append(decode_event(b"m", value))
    return out


def test_runtime_learns_named_x_bit_identically_one_by_one_and_in_batches() -> None:
    X = _rows(1, 60)
    by_list, by_name, by_name_batch = _runtime(), _runtime(), _runtime()
    for i, (e, n) in enumerate(zip(_events(X, False), _events(X, True), strict=True)):
        assert by_list.handle(e, 0, i) == APPLIED and by_name.handle(n, 0, i) == APPLIED
    items = [(e, 0, i) for i, e in enumerate(_events(X, True))]
    assert [o for o, _ in by_name_batch.handle_many(items)] == [APPLIED] * 60
    assert _learned(by_name) == _learned(by_list)
    assert _learned(by_name_batch) == _learned(by_list)


def test_runtime_rejects_unknown_names_and_objects_without_features() -> None:
    X = _rows(2, 5)
    events = _events(X, True)
    events[2].x = {"a": 1.0, "nope": 2.0}
    rt, ref = _runtime(), _runtime()
    out = rt.handle_many([(e, 0, i) for i, e in enumerate(events)])
    assert [o for o, _ in out] == [APPLIED, APPLIED, REJECTED, APPLIED, APPLIED]
    assert "unknown features 'nope'" in out[2][1] and "model 'm'" in out[2][1]
    for i, e in enumerate(events):  # the batch equals the loop, the bad event left out
        if i != 2:
            ref.handle(e, 0, i)
    assert _learned(rt) == _learned(ref) and rt.counters.rejected == 1
    unnamed = _runtime(features=None)
    assert unnamed.handle(_events(X, True)[0], 0, 0) == REJECTED
    assert "no feature names" in unnamed.last_reason
    assert unnamed.handle(_events(X, False)[0], 0, 1) == APPLIED


# --- the API and a real worker ------------------------------------------------------------
@pytest.fixture(scope="module")
def stack(make_settings) -> Iterator[tuple[TestClient, Settings]]:  # type: ignore[no-untyped-def]
    settings: Settings = make_settings(commit_interval_s=0.2, commit_every=20)
    with api_and_worker(settings) as client:
        yield client, settings


def _create(client: TestClient, **extra: Any) -> str:
    mid = f"nf-{uuid.uuid4().hex[:8]}"
    spec = {"id": mid, "kind": "pa", "dim": 4, "params": {"C": 1.0}, **extra}
    r = client.post("/v1/models", json=spec)
    assert r.status_code == 201, r.text
    return mid


def _state(settings: Settings, mid: str) -> StoredState:
    stored = redis_call(settings, lambda r, keys: read_state(r, keys, mid))
    assert stored is not None
    return stored


@pytest.mark.service
def test_features_are_stored_and_assets_is_their_earlier_name(
    stack: tuple[TestClient, Settings],
) -> None:
    client, _ = stack
    mid = _create(client, features=FEATURES)
    got = client.get(f"/v1/models/{mid}").json()
    assert got["features"] == FEATURES and "assets" not in got
    old = _create(client, assets=FEATURES)
    assert client.get(f"/v1/models/{old}").json()["features"] == FEATURES
    same = _create(client, assets=FEATURES, features=FEATURES)
    assert client.get(f"/v1/models/{same}").json()["features"] == FEATURES


@pytest.mark.service
def test_http_events_and_predict_with_named_x(stack: tuple[TestClient, Settings]) -> None:
    client, settings = stack
    named, listed = _create(client, features=FEATURES), _create(client, features=FEATURES)
    X = _rows(3, 80)
    y = (X @ W).tolist()
    for mid, as_named in ((named, True), (listed, False)):
        events = [
            {"id": f"e{i}", "x": _named(row) if as_named else row.tolist(), "y": y[i]}
            for i, row in enumerate(X)
        ]
        assert client.post(f"/v1/models/{mid}/events", json={"events": events}).status_code == 202
    for mid in (named, listed):
        wait_status(client, mid, lambda s: s["applied"] == 80)
    a, b = _state(settings, named), _state(settings, listed)
    assert a.state == b.state and a.stats == b.stats  # bit-identical learned state

    probe = np.array([0.3, 0.0, -0.1, 2.0])
    by_list = client.post(f"/v1/models/{named}/predict", json={"x": probe.tolist()}).json()
    by_name = client.post(f"/v1/models/{named}/predict", json={"x": _named(probe)}).json()
    assert by_name["predictions"][0]["value"] == by_list["predictions"][0]["value"]
    batch = client.post(
        f"/v1/models/{named}/predict", json={"instances": [_named(probe), probe.tolist()]}
    ).json()
    assert [p["value"] for p in batch["predictions"]] == [by_list["predictions"][0]["value"]] * 2
    # the label of a named prediction is learned with its x in list form
    pid = by_name["predictions"][0]["prediction_id"]
    r = client.post(f"/v1/models/{named}/labels", json={"prediction_id": pid, "y": 1.0})
    assert r.status_code == 202 and r.json()["status"] == "accepted"
    wait_status(client, named, lambda s: s["applied"] == 81)


@pytest.mark.service
@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        (
            "events",
            {"events": [{"x": {"a": 1.0}}, {"x": {"a": 1, "zz": 2}}]},
            "events[1]: x names unknown features 'zz'",
        ),
        (
            "predict",
            {"x": {"a": 1.0, "zz": 2.0, "yy": 0}},
            "x: x names unknown features 'zz', 'yy'",
        ),
        (
            "predict",
            {"instances": [[1, 2, 3, 4], {"q": 1}]},
            "instances[1]: x names unknown features 'q'",
        ),
        ("quantify", {"instances": [{"q": 1}]}, "unknown features 'q'"),
        (
            "events",
            {"events": [{"x": {"a": "b"}}]},
            "events[0].x.a: Input should be a valid number",
        ),
        ("predict", {"x": {"a": float("inf")}}, "x.a"),
    ],
)
def test_unknown_names_are_a_readable_422(
    stack: tuple[TestClient, Settings], path: str, body: dict[str, Any], needle: str
) -> None:
    client, _ = stack
    kind = "nemsis" if path == "quantify" else "pa"
    mid = _create(client, features=FEATURES, kind=kind, params={})
    r = client.post(
        f"/v1/models/{mid}/{path}",
        content=json.dumps(body),
        headers={"content-type": "application/json"},
    )
    if path == "quantify" and r.status_code == 409:
        pytest.skip("nemsis not installed")
    assert r.status_code == 422, r.text
    assert needle in r.json()["detail"], r.json()["detail"]


@pytest.mark.service
def test_object_x_for_a_model_without_features_is_a_422(
    stack: tuple[TestClient, Settings],
) -> None:
    client, _ = stack
    mid = _create(client)
    for path, body in (("events", {"events": [{"x": {"a": 1}}]}), ("predict", {"x": {"a": 1}})):
        r = client.post(f"/v1/models/{mid}/{path}", json=body)
        assert r.status_code == 422 and "no feature names" in r.json()["detail"], r.text


@pytest.mark.service
def test_kafka_named_x_is_learned_like_the_list_and_unknown_names_dead_letter(
    stack: tuple[TestClient, Settings],
) -> None:
    client, settings = stack
    named, listed = _create(client, features=FEATURES), _create(client, features=FEATURES)
    X = _rows(4, 60)
    records = []
    for i, row in enumerate(X):
        y = float(row @ W)
        records.append(wire.example(named, f"k{i}", _named(row), y, ts=0.0))
        records.append(wire.example(listed, f"k{i}", row.tolist(), y, ts=0.0))
    bad = wire.example(named, "bad-name", {"a": 1.0, "nope": 2.0}, 1.0, ts=0.0)
    records.insert(30, bad)
    plain = _create(client)  # no features: an object x is dead-lettered, a list learned
    records += [
        wire.example(plain, "unnamed-obj", {"a": 1.0}, 1.0, ts=0.0),
        wire.example(plain, "unnamed-list", [1.0, 0.0, 0.0, 0.0], 1.0, ts=0.0),
    ]
    asyncio.run(produce(settings, (wire.encode(r) for r in records), raw=True))
    wait_status(client, named, lambda s: s["applied"] == 60 and s["rejected"] == 1)
    wait_status(client, listed, lambda s: s["applied"] == 60)
    a, b = _state(settings, named), _state(settings, listed)
    assert a.state == b.state and a.stats == b.stats  # bit-identical learned state
    replay = learners.build("pa", 4, C=1.0)  # and what the list form learns in-process
    replay.learn_many(X, [float(row @ W) for row in X])
    assert a.state == _learned_state(replay)
    letters = [
        json.loads(v) for _, _, _, v in asyncio.run(read_topic(settings, settings.deadletter_topic))
    ]
    reasons = [x["reason"] for x in letters if '"bad-name"' in x["value"]]
    assert len(reasons) == 1 and "x names unknown features 'nope'" in reasons[0], letters
    wait_status(client, plain, lambda s: s["applied"] == 1 and s["rejected"] == 1)
    letters = [
        json.loads(v) for _, _, _, v in asyncio.run(read_topic(settings, settings.deadletter_topic))
    ]
    reasons = [x["reason"] for x in letters if '"unnamed-obj"' in x["value"]]
    assert len(reasons) == 1 and "the model has no feature names" in reasons[0], letters


def _learned_state(learner: learners.Learner) -> bytes:
    from learners.codec import encode_state

    return encode_state(learner.state())
