"""A predict that cannot give a finite answer is a 422 that says why (issue 32), not a 200
with ``value: null``: the JSON answer (one x, instances, the FastAPI path of a named x),
the binary body and the compact answer alike; finite rows of the same model still answer."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from clients.batch_answer import ANSWER_CONTENT_TYPE
from clients.wire import PREDICT_CONTENT_TYPE, encode_predict_batch
from service.config import Settings
from tests.service._api_helpers import pa_with_weights, write_state

pytestmark = pytest.mark.service

W = [0.5, -1.25, 3.0]
HUGE = [1e308, 1e308, 1e308]  # 0.5e308 - 1.25e308 + 3e308 overflows: inf


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings()


@pytest.fixture(scope="module")
def model(client: TestClient, api_settings: Settings) -> str:
    mid = f"fin-{uuid.uuid4().hex[:8]}"
    spec = {"id": mid, "kind": "pa", "dim": 3, "features": ["a", "b", "c"]}
    r = client.post("/v1/models", json=spec)
    assert r.status_code == 201, r.text
    write_state(api_settings, mid, pa_with_weights(W), 0, offset=0)
    return mid


def _says_why(r, row: int | None) -> None:  # type: ignore[no-untyped-def]
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "is not finite (inf)" in detail and "largest |x| is 1e+308" in detail, detail
    if row is not None:
        assert f"for row {row} " in detail, detail


def test_one_x_is_a_422(client: TestClient, model: str) -> None:
    _says_why(client.post(f"/v1/models/{model}/predict", json={"x": HUGE}), None)
    named = {"x": dict(zip("abc", HUGE, strict=True))}  # the FastAPI handler's path
    _says_why(client.post(f"/v1/models/{model}/predict", json=named), None)
    ok = client.post(f"/v1/models/{model}/predict", json={"x": [1.0, 1.0, 1.0]})
    assert ok.status_code == 200 and ok.json()["predictions"][0]["value"] == 2.25, ok.text


def test_instances_name_the_row(client: TestClient, model: str) -> None:
    body = {"instances": [[1.0, 0.0, 0.0], HUGE, [0.0, 1.0, 0.0]]}
    _says_why(client.post(f"/v1/models/{model}/predict", json=body), 1)
    compact = client.post(
        f"/v1/models/{model}/predict", json=body, headers={"Accept": ANSWER_CONTENT_TYPE}
    )
    _says_why(compact, 1)


def test_the_binary_body_and_the_compact_answer(client: TestClient, model: str) -> None:
    X = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], HUGE]
    for accept in ("application/json", ANSWER_CONTENT_TYPE):
        r = client.post(
            f"/v1/models/{model}/predict",
            content=encode_predict_batch(X),
            headers={"Content-Type": PREDICT_CONTENT_TYPE, "Accept": accept},
        )
        _says_why(r, 2)
