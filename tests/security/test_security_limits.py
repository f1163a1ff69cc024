"""Hostile JSON bodies the schema fuzzer rarely builds: deep nesting, numbers beyond float
range or Python's int-parsing limit, NaN/Infinity literals, duplicate keys, a vector far
past ``max_dim``, a body past ``max_body_bytes``. Never a 5xx; always a readable error."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.api import create_app

pytestmark = [pytest.mark.service]

HOSTILE = {
    "deep-nesting": b"[" * 50_000 + b"]" * 50_000,
    "int-beyond-float": b"[1" + b"0" * 400 + b", 1]",
    "int-over-4300-digits": b"[1" + b"0" * 5000 + b", 1]",
    "float-overflow": b"[1e400, 1]",
    "nan-literal": b"[NaN, 1]",
    "infinity-literal": b"[-Infinity, 1]",
    "huge-vector": b"[" + b"0.5," * 200_000 + b"0.5]",
}


@pytest.fixture(scope="module")
def api(make_settings) -> Iterator[tuple[TestClient, str]]:  # type: ignore[no-untyped-def]
    st = make_settings(max_body_bytes=1 << 20, max_dim=1000, max_batch=10)
    with TestClient(create_app(st), raise_server_exceptions=False) as c:
        mid = f"lim-{uuid.uuid4().hex[:6]}"
        assert c.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        yield c, mid


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("route", ["predict", "events"])
def test_hostile_vectors_are_refused_readably(api, name: str, route: str) -> None:  # type: ignore[no-untyped-def]
    c, mid = api
    x = HOSTILE[name]
    body = b'{"x": ' + x + b"}" if route == "predict" else b'{"events": [{"x": ' + x + b"}]}"
    r = c.post(
        f"/v1/models/{mid}/{route}", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code in (413, 422), (r.status_code, r.text[:300])
    assert isinstance(r.json()["detail"], str) and r.json()["detail"]


def test_dim_and_batch_limits(api) -> None:  # type: ignore[no-untyped-def]
    c, mid = api
    too_big = c.post("/v1/models", json={"id": f"{mid}-big", "kind": "pa", "dim": 1001})
    assert too_big.status_code == 422 and "limit of 1000" in too_big.json()["detail"]
    batch = c.post(f"/v1/models/{mid}/predict", json={"instances": [[1.0, 2.0]] * 11})
    assert batch.status_code == 422 and "at most 10" in batch.json()["detail"]
    ok = c.post(f"/v1/models/{mid}/predict", json={"instances": [[1.0, 2.0]] * 10})
    assert ok.status_code == 200
