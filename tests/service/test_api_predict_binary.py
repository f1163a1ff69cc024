"""The predict route's binary batch body (docs/events.md §7): the same predictions, storage
and answer as the same rows sent as JSON ``instances``; a late label joins a binary
prediction; any malformed body is a 422 with a readable message, never a 500."""

from __future__ import annotations

import struct
import uuid

import numpy as np
import pytest
from fastapi.testclient import TestClient

from clients.wire import PREDICT_CONTENT_TYPE, PREDICT_HEADER, encode_frame, encode_predict_batch
from service.api import create_app
from service.config import Settings
from tests.service._api_helpers import events_for, pa_with_weights, write_state

pytestmark = pytest.mark.service

W = [0.5, -1.25, 3.0]
MAX_BATCH = 6
BINARY = {"Content-Type": PREDICT_CONTENT_TYPE}


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(max_batch=MAX_BATCH)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def model(client: TestClient, api_settings: Settings) -> str:
    mid = f"bin-{uuid.uuid4().hex[:8]}"
    assert client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3}).status_code == 201
    write_state(api_settings, mid, pa_with_weights(W), 0, offset=0)
    return mid


def _binary(client: TestClient, mid: str, body: bytes):  # type: ignore[no-untyped-def]
    return client.post(f"/v1/models/{mid}/predict", content=body, headers=BINARY)


def _values(response) -> list:  # type: ignore[no-untyped-def]
    return [(p["value"], p["scores"]) for p in response.json()["predictions"]]


def test_binary_batch_equals_the_json_batch(client: TestClient, model: str) -> None:
    X = np.random.default_rng(5).normal(size=(MAX_BATCH, 3))
    hints = [None, 0.5, None, -1.25, None, 2.0]
    for h in (None, hints):
        as_json = client.post(
            f"/v1/models/{model}/predict", json={"instances": X.tolist(), "hints": h}
        )
        got = _binary(client, model, encode_predict_batch(X, hints=h))
        assert got.status_code == 200 == as_json.status_code, got.text
        assert _values(got) == _values(as_json)
        assert got.json()["model_version"] == as_json.json()["model_version"] == 1
        assert set(got.json()) == set(as_json.json())
        assert [set(p) for p in got.json()["predictions"]] == [
            set(p) for p in as_json.json()["predictions"]
        ]
    np.testing.assert_allclose([v for v, _ in _values(got)], X @ np.asarray(W), rtol=1e-12)


def test_content_type_parameters_and_case_are_accepted(client: TestClient, model: str) -> None:
    body = encode_predict_batch([[1.0, 2.0, 3.0]])
    r = client.post(
        f"/v1/models/{model}/predict",
        content=body,
        headers={"Content-Type": PREDICT_CONTENT_TYPE.upper() + "; version=1"},
    )
    assert r.status_code == 200, r.text


def test_a_late_label_joins_a_binary_prediction(
    client: TestClient, model: str, api_settings: Settings
) -> None:
    X = np.random.default_rng(7).normal(size=(3, 3))
    r = _binary(client, model, encode_predict_batch(X, hints=[None, 0.75, None]))
    pids = [p["prediction_id"] for p in r.json()["predictions"]]
    for pid in pids[:2]:
        lab = client.post(f"/v1/models/{model}/labels", json={"prediction_id": pid, "y": 2.0})
        assert lab.status_code == 202 and lab.json()["status"] == "accepted", lab.text
    marker = f"marker-{uuid.uuid4().hex[:6]}"
    client.post(f"/v1/models/{model}/events", json={"events": [{"id": marker, "x": [0, 0, 0]}]})
    got = events_for(api_settings, model, lambda f: any(e["id"] == marker for e in f))
    joined = {e["prediction_id"]: (e["x"], e.get("hint")) for e in got if "prediction_id" in e}
    assert joined == {pids[0]: (X[0].tolist(), None), pids[1]: (X[1].tolist(), 0.75)}


def _header(n: int = 1, d: int = 3, version: int = 1, flags: int = 0, reserved: int = 0) -> bytes:
    return PREDICT_HEADER.pack(b"\x93OPB", version, flags, reserved, n, d)


ROW = np.asarray([1.0, 2.0, 3.0]).tobytes()
MALFORMED = {
    "empty": (b"", "shorter than the 16-byte header"),
    "truncated header": (_header()[:10], "shorter than the 16-byte header"),
    "truncated rows": (_header() + ROW[:-1], "layout takes 40"),
    "trailing bytes": (_header() + ROW + b"\0", "layout takes 40"),
    "json magic": (b'{"instances": [[1, 2, 3]]}', "magic"),
    "event frame": (encode_frame("m", ["e"], [[1.0, 2.0, 3.0]]), "magic"),
    "version 2": (_header(version=2) + ROW, "version 2 is not supported"),
    "unknown flag": (_header(flags=2) + ROW, "unknown header flags"),
    "reserved": (_header(reserved=1) + ROW, "reserved"),
    "no rows": (_header(n=0), "must not be empty"),
    "no columns": (_header(d=0), "must not be empty"),
    "too many rows": (
        _header(n=MAX_BATCH + 1) + ROW * (MAX_BATCH + 1),
        f"at most {MAX_BATCH} per request",
    ),
    "huge n": (_header(n=2**32 - 1), f"at most {MAX_BATCH} per request"),
    "huge d": (_header(d=2**32 - 1) + ROW, "layout takes"),
    "wrong dim": (
        _header(d=4) + np.arange(4.0).tobytes(),
        "instances[0] must have dimension 3",
    ),
    "nan": (_header(n=2) + ROW + struct.pack("<3d", 1, float("nan"), 0), "instances[1]"),
    "inf": (_header() + struct.pack("<3d", float("inf"), 0, 0), "finite"),
    "inf hint": (_header(flags=1) + ROW + struct.pack("<d", float("-inf")), "hints[0]"),
    "hints missing": (_header(flags=1) + ROW, "layout takes 48"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_body_is_a_readable_422(client: TestClient, model: str, name: str) -> None:
    body, words = MALFORMED[name]
    r = _binary(client, model, body)
    assert r.status_code == 422, (name, r.status_code, r.text)
    assert words in r.json()["detail"], r.json()


def test_random_mutations_are_never_a_500(client: TestClient, model: str) -> None:
    """Seeded byte flips, cuts and insertions of valid bodies: a 200 or a 422, nothing else."""
    rng = np.random.default_rng(18)
    seeds = [
        encode_predict_batch(rng.normal(size=(4, 3))),
        encode_predict_batch(rng.normal(size=(2, 3)), hints=[None, 1.0]),
    ]
    seen = set()
    for _ in range(150):
        body = bytearray(seeds[int(rng.integers(len(seeds)))])
        for _ in range(int(rng.integers(1, 4))):
            op = int(rng.integers(3))
            at = int(rng.integers(len(body) + 1))
            if op == 0 and body:
                body[min(at, len(body) - 1)] = int(rng.integers(256))
            elif op == 1:
                del body[at : at + int(rng.integers(1, 9))]
            else:
                body[at:at] = rng.bytes(int(rng.integers(1, 9)))
        r = _binary(client, model, bytes(body))
        seen.add(r.status_code)
        assert r.status_code in (200, 422), (bytes(body).hex(), r.status_code, r.text)
        if r.status_code == 422:
            assert r.json()["detail"]
    assert seen == {200, 422}  # both outcomes drawn: the mutations reach past the header


def test_an_unknown_model_is_a_404(client: TestClient) -> None:
    r = _binary(client, "no-such-model", encode_predict_batch([[1.0, 2.0, 3.0]]))
    assert r.status_code == 404, r.text


def test_dependency_overrides_serve_it_through_the_json_handler(
    api_settings: Settings, model: str
) -> None:
    """With overrides the fast paths are off: the binary body still answers the same."""
    app = create_app(api_settings)
    app.dependency_overrides[_unused] = _unused
    X = np.random.default_rng(9).normal(size=(2, 3))
    with TestClient(app) as slow, TestClient(create_app(api_settings)) as fast:
        a = _binary(slow, model, encode_predict_batch(X, hints=[0.5, None]))
        b = _binary(fast, model, encode_predict_batch(X, hints=[0.5, None]))
        assert a.status_code == 200 == b.status_code, a.text
        assert _values(a) == _values(b)
        bad = _binary(slow, model, _header(version=3) + ROW)
        assert bad.status_code == 422 and "version 3" in bad.json()["detail"]


def _unused() -> None:
    return None


def test_openapi_documents_the_binary_body(client: TestClient) -> None:
    op = client.get("/openapi.json").json()["paths"]["/v1/models/{model_id}/predict"]["post"]
    content = op["requestBody"]["content"]
    assert "application/json" in content and PREDICT_CONTENT_TYPE in content
