"""The predict route's fast path (service/api/routes/predict.py) answers every body exactly
as FastAPI's own handler: the same status, detail and values, whether the body is plain
numbers (read as one matrix when the raw bytes prove it) or anything else. A dependency
override switches the fast path off, so one app of each kind answers the same bodies."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from clients.batch_answer import parse_prediction_id
from service.api import create_app
from service.api.routes.predict import _number_matrix
from service.config import Settings
from tests.service._api_helpers import pa_with_weights, write_state

pytestmark = pytest.mark.service

W = [0.5, -1.25, 3.0]


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(max_batch=6)  # type: ignore[no-any-return]


def _unused() -> None:  # the override's key: its presence alone disables the fast path
    return None


@pytest.fixture(scope="module")
def clients(api_settings: Settings) -> Iterator[tuple[TestClient, TestClient, str]]:
    slow_app = create_app(api_settings)
    slow_app.dependency_overrides[_unused] = _unused
    with TestClient(create_app(api_settings)) as fast, TestClient(slow_app) as slow:
        mid = f"m-{uuid.uuid4().hex[:8]}"
        assert fast.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 3}).status_code == 201
        write_state(api_settings, mid, pa_with_weights(W), 0, offset=0)
        yield fast, slow, mid


BODIES = [
    b'{"instances": [[1, 2, 3], [0.1, -0.2, 1e-300]]}',
    b'{"instances":[[1,2,3]],"hints":[null]}',
    b'{"instances": [[1.5, 2, 3]], "hints": [0.25]}',
    b'{"x": [1, 2, 3], "hint": 2}',
    b'{"instances": [[1, 2, true]]}',
    b'{"instances": [[1, 2, false]]}',
    b'{"instances": [[1, 2, "3"]]}',
    b'{"instances": [[1, 2, null]]}',
    b'{"instances": [[1, 2, 1e999]]}',
    b'{"instances": [[1, 2, -1e999]]}',
    b'{"instances": [[1, 2], [1, 2, 3]]}',
    b'{"instances": [[1, 2]]}',
    b'{"instances": [[1, 2, 3, 4]]}',
    b'{"instances": [[1, 2, [3]]]}',
    b'{"instances": [[1, 2, {}]]}',
    b'{"instances": [[]]}',
    b'{"instances": []}',
    b'{"instances": [1, 2, 3]}',
    b'{"instances": [[1, 2, 3]], "instances": [[1, 2, 3]]}',
    b'{"instances": [[1, 2, 3]], "hints": [true]}',
    b'{"instances": [[1, 2, 3]], "hints": [1, 2]}',
    b'{"instances": [[1, 2, 3]], "extra": 1}',
    b'{"instances": [[1e308, 1e308, 1e308]]}',
    b'{"instances": [[18446744073709551615, 2, 3]]}',
    b'{"instances": ' + orjson.dumps([[1, 2, 3]] * 7) + b"}",
    b'{"instances": [[1, 2, 3]]',
]


@pytest.mark.parametrize("body", BODIES, ids=range(len(BODIES)))
def test_fast_path_answers_as_the_handler(
    clients: tuple[TestClient, TestClient, str], body: bytes
) -> None:
    fast, slow, mid = clients
    headers = {"content-type": "application/json"}
    a, b = (
        c.post(f"/v1/models/{mid}/predict", content=body, headers=headers) for c in (fast, slow)
    )
    assert a.status_code == b.status_code, (a.text, b.text)
    ja, jb = a.json(), b.json()
    if a.status_code == 200:
        for j in (ja, jb):
            for p in j["predictions"]:
                assert parse_prediction_id(p.pop("prediction_id")) is not None
        x = orjson.loads(body)
        rows = x["instances"] if "instances" in x else [x["x"]]
        want = [float(np.dot(W, np.array(r, dtype=np.float64))) for r in rows]
        got = [p["value"] for p in ja["predictions"]]
        assert [g if g is not None else float("inf") for g in got] == pytest.approx(want)
    assert ja == jb


def _matrix(body: bytes) -> Any:
    return _number_matrix(orjson.loads(body), body)


def test_the_matrix_is_proven_only_for_plain_numbers() -> None:
    plain = b'{"instances": [[1, 2.5, -3e-5]], "hints": [null]}'
    assert _matrix(plain).tolist() == [[1.0, 2.5, -3e-5]]
    assert _matrix(b'{"instances": [[1, 2, 3]], "hints": [1.5]}') is not None
    not_plain = [
        b'{"instances": [[1, 2, true]]}',
        b'{"instances": [[1, 2, "3"]]}',
        b'{"instances": [[1, 2, null]]}',
        b'{"instances": [[1, 2], [1, 2, 3]]}',
        b'{"instances": [[1, 2, [3]]]}',
        b'{"instances": [[1, 2, {}]]}',
        b'{"instances": [1, 2, 3]}',
        b'{"instances": []}',
    ]
    for body in not_plain:
        assert _matrix(body) is None, body
    # bytes that could hide a bool or a string are left to the exact passes
    assert _matrix(b'{"instances": [[1, 2, 3]], "hints": [true]}') is None
    assert _matrix(b'{"instances": [[1, 2, 3]], "instances": [[1, 2, 3]]}') is None
    assert _matrix(b'{"x": [1, 2, 3]}') is None
