"""One pass over what the service does with Redis: the API (in process) and a worker
process, every route family that reads or writes Redis. ``tests/deploy/test_redis_acl.py``
runs it as the ACL users of deploy/redis/users.acl.template; a command or key the ACL
leaves out fails a request or stops the worker's learning, so the pass fails."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient

WAIT_S = 30.0


def wait(pred: Callable[[], Any], what: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"no {what} within {WAIT_S}s")


def exercise(
    client: TestClient,
    mid: str,
    headers: dict[str, str],
    send_raw: Callable[[bytes, bytes], None],
) -> dict[str, Any]:
    """Create, learn, refuse one event (sent raw to Kafka with ``send_raw(key, value)``:
    the API would answer it 422), predict, label, read every figure and the dead letters,
    roll back, delete. Returns the status after the label was learned."""

    def ok(r: Any, *codes: int) -> Any:
        assert r.status_code in codes, (r.request.method, r.request.url, r.status_code, r.text)
        return r

    spec = {"id": mid, "kind": "pa", "dim": 3, "params": {"variant": "pa2", "C": 1.0}}
    ok(client.post("/v1/models", json=spec, headers=headers), 201)
    events = [{"id": f"e{i}", "x": [1.0, float(i % 7), -1.0], "y": float(i % 5)} for i in range(60)]
    ok(client.post(f"/v1/models/{mid}/events", json={"events": events}, headers=headers), 202)
    # the same ids again: dropped as duplicates (the seen window)
    ok(client.post(f"/v1/models/{mid}/events", json={"events": events[:5]}, headers=headers), 202)

    def status() -> dict[str, Any]:
        return ok(client.get(f"/v1/models/{mid}", headers=headers), 200).json()["status"]  # type: ignore[no-any-return]

    wait(lambda: status()["applied"] == 60 and status()["duplicate"] == 5, "60 applied, 5 dupes")
    # a wrong dimension: the worker refuses it (dead-letter topic, the model's letter list)
    bad = {"model": mid, "id": "bad-1", "x": [1.0, 2.0], "y": 1.0}
    send_raw(mid.encode(), json.dumps(bad).encode())
    wait(lambda: status()["rejected"] == 1, "the bad event refused")
    letters = ok(client.get(f"/v1/models/{mid}/deadletters", headers=headers), 200).json()
    assert [d["event_id"] for d in letters["deadletters"]] == ["bad-1"], letters
    pred = ok(
        client.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 2.0, -1.0]}, headers=headers),
        200,
    ).json()
    pid = pred["predictions"][0]["prediction_id"]
    ok(
        client.post(
            f"/v1/models/{mid}/labels",
            json={"prediction_id": pid, "y": 3.0},
            headers={**headers, "Idempotency-Key": f"{mid}-label"},
        ),
        202,
    )
    learned = wait(lambda: (s := status())["applied"] == 61 and s, "the label learned")
    for path in ("metrics", "figures", "series", "checkpoints"):
        ok(client.get(f"/v1/models/{mid}/{path}", headers=headers), 200)
    ok(client.get("/v1/models", headers=headers), 200)
    ok(client.get("/readyz"), 200)
    versions = ok(client.get(f"/v1/models/{mid}/checkpoints", headers=headers), 200).json()
    first = min(v["version"] for v in versions["checkpoints"])
    ok(client.post(f"/v1/models/{mid}/rollback", json={"version": first}, headers=headers), 202)
    wait(lambda: status()["version"] > learned["version"], "the rollback applied")
    ok(client.delete(f"/v1/models/{mid}", headers=headers), 204)
    ok(client.get(f"/v1/models/{mid}", headers=headers), 404)
    return learned
