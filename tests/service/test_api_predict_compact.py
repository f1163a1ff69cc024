"""The predict route's compact answer (docs/events.md §8) and its one Redis record per batch
(docs/design.md, "Redis keys"): the compact answer is the JSON answer value for value; a
late label joins a row of a batch once; per-row records of the layout before still join;
malformed Accept headers and prediction ids are a 422 or a 404, never a 500."""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

import learners
from clients.batch_answer import ANSWER_CONTENT_TYPE, decode_answer, parse_prediction_id
from clients.wire import PREDICT_CONTENT_TYPE, encode_predict_batch
from service.api import create_app
from service.api.redis_access import RedisAccess
from service.config import Settings
from service.store.connect import redis_client
from service.store.keys import Keys
from tests.service._api_helpers import (
    events_for,
    pa_with_weights,
    record_of,
    redis_call,
    write_state,
)

pytestmark = pytest.mark.service

W = [0.5, -1.25, 3.0]
COMPACT = {"Accept": ANSWER_CONTENT_TYPE}


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(max_batch=64)


def _create(client: TestClient, kind: str = "pa", **extra: Any) -> str:
    mid = f"cmp-{uuid.uuid4().hex[:8]}"
    r = client.post("/v1/models", json={"id": mid, "kind": kind, "dim": 3, **extra})
    assert r.status_code == 201, r.text
    return mid


@pytest.fixture(scope="module")
def model(client: TestClient, api_settings: Settings) -> str:
    mid = _create(client)
    write_state(api_settings, mid, pa_with_weights(W), 0, offset=0)
    return mid


def _bits(answer: dict[str, Any]) -> list[Any]:
    """Every prediction's fields but its id, floats as their bytes (bit for bit)."""

    def exact(v: Any) -> Any:
        if isinstance(v, float):
            return struct.pack("<d", v)
        if isinstance(v, dict):
            return {k: exact(x) for k, x in v.items()}
        return (type(v), v)

    return [
        {k: exact(v) for k, v in p.items() if k != "prediction_id"} for p in answer["predictions"]
    ]


def _both(client: TestClient, mid: str, **kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(JSON answer, decoded compact answer) of the same request."""
    url = f"/v1/models/{mid}/predict"
    headers = kw.pop("headers", {})
    plain = client.post(url, **kw, headers=headers)
    packed = client.post(url, **kw, headers={**headers, **COMPACT})
    assert plain.status_code == 200 == packed.status_code, (plain.text, packed.text)
    assert plain.headers["content-type"] == "application/json"
    assert packed.headers["content-type"] == ANSWER_CONTENT_TYPE
    return plain.json(), decode_answer(packed.content)


def _check_ids(answer: dict[str, Any]) -> None:
    parsed = [parse_prediction_id(p["prediction_id"]) for p in answer["predictions"]]
    assert [row for _, row in parsed] == list(range(len(parsed)))  # type: ignore[misc]
    assert len({batch for batch, _ in parsed}) == 1  # type: ignore[misc]


@pytest.mark.parametrize("hints", [None, [None, 0.5, None, -1.25] * 10])
def test_the_compact_answer_is_the_json_answer_bit_for_bit(
    client: TestClient, model: str, hints: list[float | None] | None
) -> None:
    X = np.random.default_rng(11).normal(size=(40, 3)) * 1e3
    for kw in (
        {"json": {"instances": X.tolist(), "hints": hints}},
        {
            "content": encode_predict_batch(X, hints),
            "headers": {"Content-Type": PREDICT_CONTENT_TYPE},
        },
    ):
        plain, packed = _both(client, model, **kw)
        assert _bits(packed) == _bits(plain) and packed["model_version"] == 1
        assert set(packed) == set(plain)
        _check_ids(plain), _check_ids(packed)


def test_a_classifier_answers_labels_probabilities_and_scores(
    client: TestClient, api_settings: Settings
) -> None:
    mid = _create(client, "arow")
    rows = np.random.default_rng(3).normal(size=(30, 3))
    y = np.where(rows @ np.asarray(W) > 0, 1, -1)
    trained = learners.build("arow", 3)
    for r, v in zip(rows.tolist(), y.tolist(), strict=True):
        trained.learn(r, v)
    write_state(api_settings, mid, trained, 0, offset=0)
    plain, packed = _both(client, mid, json={"instances": rows[:12].tolist()})
    assert _bits(packed) == _bits(plain)
    first = plain["predictions"][0]
    assert first["probabilities"] and first["scores"] and type(first["value"]) is not float
    _check_ids(packed)


def test_the_single_vector_and_the_slow_path_answer_compact_too(
    client: TestClient, model: str, api_settings: Settings
) -> None:
    plain, packed = _both(client, model, json={"x": [1, 2, 3], "hint": 2})
    assert _bits(packed) == _bits(plain)
    slow_app = create_app(api_settings)
    slow_app.dependency_overrides[_unused] = _unused  # no fast paths
    with TestClient(slow_app) as slow:
        a, b = _both(slow, model, json={"instances": [["1", 2, 3], [0, 0, 1]]})
        assert _bits(a) == _bits(b)


def _unused() -> None:
    return None


@pytest.mark.parametrize(
    "accept",
    [
        "text/html",
        "*/*",
        ",,;;,",
        f"{ANSWER_CONTENT_TYPE};q=0",
        f"{ANSWER_CONTENT_TYPE}x",
        "application/vnd.onlinepredict.predictions-v2",
        "x" * 4000,
    ],
)
def test_any_other_accept_gets_json(client: TestClient, model: str, accept: str) -> None:
    url = f"/v1/models/{model}/predict"
    r = client.post(url, json={"x": [1, 2, 3]}, headers={"Accept": accept})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json", r.text


@pytest.mark.parametrize(
    ("accept", "words"),
    [
        (f"{ANSWER_CONTENT_TYPE}; version=2", "version '2' is not supported"),
        (f"application/json, {ANSWER_CONTENT_TYPE};q=high", "q='high'"),
        (f"{ANSWER_CONTENT_TYPE};q=1.5", "not in [0, 1]"),
        (f"{ANSWER_CONTENT_TYPE};q=nan", "not in [0, 1]"),
    ],
)
def test_a_malformed_compact_accept_is_a_readable_422(
    client: TestClient, model: str, accept: str, words: str
) -> None:
    for kw in (
        {"json": {"instances": [[1, 2, 3]]}},
        {"content": encode_predict_batch([[1.0, 2.0, 3.0]])},
    ):
        headers = {"Accept": accept}
        if "content" in kw:
            headers["Content-Type"] = PREDICT_CONTENT_TYPE
        r = client.post(f"/v1/models/{model}/predict", **kw, headers=headers)  # type: ignore[arg-type]
        assert r.status_code == 422 and words in r.json()["detail"], r.text


def _label(client: TestClient, mid: str, pid: str, y: float = 2.0, **kw: Any) -> Any:
    return client.post(f"/v1/models/{mid}/labels", json={"prediction_id": pid, "y": y}, **kw)


def test_a_late_label_joins_its_row_once(
    client: TestClient, model: str, api_settings: Settings
) -> None:
    X = np.random.default_rng(8).normal(size=(6, 3))
    hints = [None, 0.75, None, None, -0.5, None]
    r = client.post(
        f"/v1/models/{model}/predict",
        content=encode_predict_batch(X, hints),
        headers={"Content-Type": PREDICT_CONTENT_TYPE, **COMPACT},
    )
    pids = [p["prediction_id"] for p in decode_answer(r.content)["predictions"]]
    for i in (1, 4, 5):
        lab = _label(client, model, pids[i], y=float(i))
        assert lab.status_code == 202 and lab.json()["status"] == "accepted", lab.text
    again = _label(client, model, pids[1], y=9.0)  # another value for a labelled row
    assert again.status_code == 202 and again.json()["status"] == "duplicate"
    assert _label(client, model, pids[4], y=4.0).json()["status"] == "duplicate"
    marker = f"marker-{uuid.uuid4().hex[:6]}"
    client.post(f"/v1/models/{model}/events", json={"events": [{"id": marker, "x": [0, 0, 0]}]})
    got = events_for(api_settings, model, lambda f: any(e["id"] == marker for e in f))
    joined = [(e["id"], e["x"], e.get("hint"), e["y"]) for e in got if "prediction_id" in e]
    assert joined == [
        (f"label:{pids[i]}", X[i].tolist(), hints[i], float(i)) for i in (1, 4, 5)
    ]  # one event per labelled row, the first value, its own row and hint

    async def fields(redis, keys):  # type: ignore[no-untyped-def]
        key, _ = record_of(keys, model, pids[0])
        return await redis.hgetall(key)

    stored = redis_call(api_settings, fields)
    assert {k for k in stored if k[:2] in (b"l:", b"y:", b"k:")} == {
        f"{f}:{i}".encode() for f in "lyk" for i in (1, 4, 5)
    }
    assert stored[b"l:1"] == b"done"


def test_concurrent_claims_of_a_row_make_one_new_claim(
    client: TestClient, model: str, api_settings: Settings
) -> None:
    """The claim is one Lua script on the batch's record: of 24 concurrent claims on one
    row exactly one is new, and other rows of the batch stay unclaimed."""
    r = client.post(f"/v1/models/{model}/predict", json={"instances": [[1, 2, 3]] * 4})
    pids = [p["prediction_id"] for p in r.json()["predictions"]]

    async def claims() -> list[str]:
        redis = redis_client(api_settings)
        try:
            access = RedisAccess(redis, Keys(api_settings.key_prefix))
            got = await asyncio.gather(
                *(access.claim_prediction(model, pids[2], f"{i}.0", None) for i in range(24))
            )
            other = await access.claim_prediction(model, pids[3], "7.0", None)
            assert other is not None and other.state == "new"
            return [c.state for c in got if c is not None]
        finally:
            await redis.aclose()

    states = asyncio.run(claims())
    assert sorted(states) == ["new"] + ["pending"] * 23


def test_a_per_row_record_from_before_batches_still_joins_once(
    client: TestClient, model: str, api_settings: Settings
) -> None:
    """A rolling upgrade: a prediction stored by the API before batch records (one hash per
    row, its id 32 hex digits) is labelled once, as then."""
    legacy = uuid.uuid4().hex

    async def write(redis, keys):  # type: ignore[no-untyped-def]
        key = keys.prediction(model, legacy)
        row = np.array([1.5, -2.0, 0.25], dtype="<f8").tobytes()
        await redis.hset(key, mapping={"xf64": row, "hint": "0.5", "v": "1", "ts": "1"})
        await redis.expire(key, 60)

    redis_call(api_settings, write)
    assert _label(client, model, legacy).json()["status"] == "accepted"
    assert _label(client, model, legacy, y=3.0).json()["status"] == "duplicate"
    assert _label(client, model, legacy + ".0").status_code == 404  # not a batch record


def test_unknown_rows_and_malformed_ids_are_404(client: TestClient, model: str) -> None:
    r = client.post(f"/v1/models/{model}/predict", json={"instances": [[1, 2, 3]] * 3})
    batch, _ = parse_prediction_id(r.json()["predictions"][0]["prediction_id"])  # type: ignore[misc]
    for pid in (
        f"{batch}.3",  # one past the last row
        f"{batch}.4294967296",
        f"{batch}.01",  # not canonical: no second id for row 1
        f"{batch}.-1",
        f"{batch}.+1",
        f"{batch}.",
        f"{batch}.1.0",
        f"{batch}.1 ",
        batch,  # the batch id alone
        f"{batch.upper()}.1",
        f"{uuid.uuid4().hex}.0",  # no such batch
        "0" * 32 + ".0",
    ):
        got = _label(client, model, pid)
        assert got.status_code == 404 and "no prediction" in got.json()["detail"], (pid, got.text)
    too_long = _label(client, model, f"{batch}.{'1' * 200}")
    assert too_long.status_code == 422  # as any id over 128 characters
    assert _label(client, model, f"{batch}.1").json()["status"] == "accepted"  # untouched


def test_the_record_is_one_hash_per_request_with_its_ttl(
    client: TestClient, api_settings: Settings
) -> None:
    model = _create(client)
    X = np.random.default_rng(2).normal(size=(5, 3))
    r = client.post(f"/v1/models/{model}/predict", json={"instances": X.tolist()})
    pids = [p["prediction_id"] for p in r.json()["predictions"]]

    async def read(redis, keys):  # type: ignore[no-untyped-def]
        key, _ = record_of(keys, model, pids[0])
        per_row = [k async for k in redis.scan_iter(match=keys.prediction(model, "*"))]
        return await redis.hgetall(key), await redis.ttl(key), per_row

    stored, ttl, per_row = redis_call(api_settings, read)
    assert stored[b"n"] == b"5" and stored[b"xf64"] == X.astype("<f8").tobytes()
    assert b"hf64" not in stored and stored[b"v"] == b"0"  # no hints: no hints block
    assert 0 < ttl <= api_settings.prediction_ttl_s
    assert per_row == []  # no per-row hashes


def test_openapi_documents_the_compact_answer(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"]["/v1/models/{model_id}/predict"]["post"]
    content = op["responses"]["200"]["content"]
    assert "application/json" in content and ANSWER_CONTENT_TYPE in content
