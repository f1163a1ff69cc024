"""422 only for what is said to be the client's fault (``InvalidInput``, the schemas'
validation); a ``ValueError`` from anywhere else in the API is a bug: a 500 with a generic
message and the traceback in the log, never the exception's text (docs/design.md, "Errors").
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

import learners
from clients import wire
from service.api import create_app, idempotency
from service.api.errors import InvalidInput
from service.api.routes import predict as predict_route
from service.config import Settings
from service.store import registry

pytestmark = pytest.mark.service

SECRET = "internal detail 7f3a: not for the client"
GENERIC = {"detail": "internal error (logged)"}


@pytest.fixture(scope="module")
def api_settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    return make_settings(max_batch=4, max_dim=64, max_state_bytes=3_000_000)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def client(api_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(api_settings), raise_server_exceptions=False) as c:
        yield c


def create(client: TestClient, kind: str = "pa", dim: int = 2) -> str:
    mid = f"m-{uuid.uuid4().hex[:8]}"
    r = client.post("/v1/models", json={"id": mid, "kind": kind, "dim": dim})
    assert r.status_code == 201, r.text
    return mid


def _raise(*_: Any, **__: Any) -> Any:
    raise ValueError(SECRET)


def _patch_matrix(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(predict_route, "_matrix", _raise)


def _patch_learner(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(learners.REGISTRY["pa"], "_predict", _raise)


def _patch_wire(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(wire, "example", _raise)


def _patch_fingerprint(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(idempotency, "fingerprint", _raise)


def _patch_marker(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(registry, "created_marker", _raise)


# (name, what to break, method, path under the model or None for /v1/models, body, headers)
BUGS: list[tuple[str, Callable[[pytest.MonkeyPatch], None], str, str | None, Any, Any]] = [
    ("predict fast path", _patch_matrix, "post", "predict", {"x": [1, 2]}, None),
    # a string for a number: not "plain", so FastAPI's own handler runs
    ("predict slow path", _patch_learner, "post", "predict", {"x": [1, "2"]}, None),
    ("learner predict", _patch_learner, "post", "predict", {"instances": [[1, 2]]}, None),
    ("events", _patch_wire, "post", "events", {"events": [{"x": [1, 2]}]}, None),
    (
        "idempotency",
        _patch_fingerprint,
        "post",
        "events",
        {"events": [{"x": [1, 2]}]},
        {"Idempotency-Key": "k-1"},
    ),
    ("create", _patch_marker, "post", None, {"kind": "pa", "dim": 2}, None),
]


@pytest.mark.parametrize(
    ("name", "patch", "method", "path", "body", "headers"), BUGS, ids=[b[0] for b in BUGS]
)
def test_an_internal_value_error_is_a_logged_500_without_its_text(
    client: TestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    patch: Callable[[pytest.MonkeyPatch], None],
    method: str,
    path: str | None,
    body: Any,
    headers: Any,
) -> None:
    mid = create(client)
    if path is None:
        url, body = "/v1/models", {"id": f"m-{uuid.uuid4().hex[:8]}", **body}
    else:
        url = f"/v1/models/{mid}/{path}"
    patch(monkeypatch)
    with caplog.at_level(logging.ERROR, logger="service.api.errors"):
        r = client.request(method, url, json=body, headers=headers)
    assert r.status_code == 500, (name, r.text)
    assert r.json() == GENERIC and SECRET not in r.text
    logged = [rec for rec in caplog.records if rec.exc_info and rec.exc_info[1] is not None]
    assert any(
        isinstance(rec.exc_info[1], ValueError) and SECRET in (rec.exc_text or "")  # type: ignore[index]
        for rec in logged
    ), (name, [rec.getMessage() for rec in caplog.records])
    assert any("Traceback" in (rec.exc_text or "") for rec in logged)


def test_invalid_input_is_not_a_value_error() -> None:
    """A ``ValueError`` caught on its way somewhere must not turn into a client error."""
    assert not issubclass(InvalidInput, ValueError)
    assert not issubclass(idempotency.KeyReused, ValueError)


def _detail(r: Any) -> str:
    assert r.status_code == 422, r.text
    body = r.json()
    assert set(body) == {"detail"}, body  # the shape the SDK reads
    return body["detail"]  # type: ignore[no-any-return]


def test_input_errors_are_422_with_their_message(client: TestClient) -> None:
    mid = create(client)
    cls_mid = create(client, kind="perceptron")
    base = f"/v1/models/{mid}"

    # predict: dimension (fast and slow path) and batch size
    assert _detail(client.post(f"{base}/predict", json={"x": [1, 2, 3]})) == (
        f"x[0] must have dimension 2 (model {mid!r}), got 3"
    )
    slow = client.post(f"{base}/predict", json={"x": [1, "2", 3]})
    assert "must have dimension 2" in _detail(slow)
    many = client.post(f"{base}/predict", json={"instances": [[1, 2]] * 5})
    assert _detail(many) == "instances: at most 4 per request, got 5"

    # creation: the learner's ValueError and TypeError, the server's limits
    new = f"m-{uuid.uuid4().hex[:8]}"
    unknown = client.post("/v1/models", json={"id": new, "kind": "no-such", "dim": 2})
    # the request schema's union on kind answers (its 422 lists the errors too)
    assert unknown.status_code == 422, unknown.text
    assert unknown.json()["detail"].startswith("kind: unknown kind 'no-such'; known: 'apas', ")
    bad_param = client.post(
        "/v1/models", json={"id": new, "kind": "pa", "dim": 2, "params": {"x": 1}}
    )
    assert "unknown parameter(s) 'x'" in _detail(bad_param)
    wrong_type = client.post(
        "/v1/models", json={"id": new, "kind": "pa", "dim": 2, "params": {"C": [1]}}
    )
    assert _detail(wrong_type).startswith("pa")
    too_wide = client.post("/v1/models", json={"id": new, "kind": "pa", "dim": 65})
    assert _detail(too_wide) == "dim 65 exceeds this server's limit of 64"
    # 3.2 MB for a transductive learner's largest block at dim 3, over the 3 MB budget
    too_big = client.post("/v1/models", json={"id": new, "kind": "transductive", "dim": 3})
    assert "ONLINEPREDICT_MAX_STATE_BYTES" in _detail(too_big)
    assert client.get(f"/v1/models/{new}").status_code == 404  # none of them was created

    # events and labels: the learner's label check
    bad_label = client.post(
        f"/v1/models/{cls_mid}/events", json={"events": [{"x": [1, 2], "y": 0.5}]}
    )
    assert _detail(bad_label).startswith("events[0].y: binary label must be")
    pred = client.post(f"/v1/models/{cls_mid}/predict", json={"x": [1, 2]})
    pid = pred.json()["predictions"][0]["prediction_id"]
    label = client.post(f"/v1/models/{cls_mid}/labels", json={"prediction_id": pid, "y": 3})
    assert _detail(label).startswith("y: binary label must be")

    # the Idempotency-Key header: malformed, repeated, reused with another body
    events = {"events": [{"x": [1, 2]}]}
    bad_key = client.post(f"{base}/events", json=events, headers={"Idempotency-Key": '"abc'})
    assert _detail(bad_key) == "Idempotency-Key: an unterminated quoted string"
    twice = client.post(
        f"{base}/events",
        json=events,
        headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
    )
    assert _detail(twice) == "send one Idempotency-Key header, got 2"
    key = {"Idempotency-Key": uuid.uuid4().hex}
    assert client.post(f"{base}/events", json=events, headers=key).status_code == 202
    other = client.post(f"{base}/events", json={"events": [{"x": [2, 1]}]}, headers=key)
    assert "was used before with another request body" in _detail(other)


def test_task_endpoint_input_errors_are_422(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "nemsis" in learners.REGISTRY:
        q = create(client, kind="nemsis")
        r = client.post(f"/v1/models/{q}/quantify", json={"instances": [[1, 2]], "method": "m"})
        assert _detail(r) == "unknown method='m'; valid ones are ['cc', 'acc', 'pcc', 'pacc']"
    if "transductive" in learners.REGISTRY:
        t = create(client, kind="transductive")
        monkeypatch.setattr(learners.REGISTRY["transductive"], "max_block", 2)
        r = client.post(f"/v1/models/{t}/blocks", json={"vectors": [[1, 2], [2, 1], [3, 1]]})
        assert _detail(r) == "transductive: a block needs 1 to 2 vectors, got 3"
