"""A Redis restored from before a delete + re-create (docs/reliability.md, "A store older
than the log"), against the real broker and ``redis-server``.

The store then holds the deleted incarnation while the log holds the new one's ``created``
marker. Before issue 32 the worker reloaded the old incarnation, replayed up to the new
marker, reloaded again, for ever: every other model of the partition stopped learning
(the audit: 24,000 "reloaded" warnings, 100 learned instead of 170, also after a restart),
and the model's status said nothing. Now that one model stops learning with the reason in
its status; the others keep learning; re-creating it brings it back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from tests.service._api_helpers import redis_call
from tests.service.conftest import WorkerProcess

pytestmark = pytest.mark.service

WAIT_S = 60.0  # bounds a hang
BAD = "stale-bad"
OTHERS = [f"stale-{i}" for i in range(6)]


@pytest.fixture
def settings(make_settings) -> Settings:  # type: ignore[no-untyped-def]
    # one partition: every model shares the bad one's
    return make_settings(commit_interval_s=0.2, commit_every=20, partitions=1)


@pytest.fixture
def stack(settings: Settings, tmp_path: Path) -> Iterator[tuple[TestClient, WorkerProcess]]:
    worker = WorkerProcess(settings, "stale", tmp_path)
    with worker.running(), TestClient(create_app(settings)) as client:
        yield client, worker


def _status(client: TestClient, mid: str) -> dict[str, Any]:
    r = client.get(f"/v1/models/{mid}")
    assert r.status_code == 200, r.text
    return r.json()["status"]  # type: ignore[no-any-return]


def _wait(client: TestClient, what: str, done: Callable[[], bool], worker: WorkerProcess) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if done():
            return
        assert worker.alive(), worker.log_text()[-3000:]
        time.sleep(0.1)
    raise AssertionError(f"not within {WAIT_S}s: {what}\n{worker.log_text()[-3000:]}")


def _send(client: TestClient, mid: str, prefix: str, n: int, rng: np.random.Generator) -> None:
    events = [
        {"id": f"{prefix}{i}", "x": rng.normal(size=2).tolist(), "y": float(rng.normal())}
        for i in range(n)
    ]
    r = client.post(f"/v1/models/{mid}/events", json={"events": events})
    assert r.status_code == 202, r.text


def _applied(client: TestClient, models: list[str], n: int) -> Callable[[], bool]:
    return lambda: all(_status(client, m)["applied"] == n for m in models)


def _snapshot(settings: Settings, model: str) -> dict[bytes, bytes]:
    """DUMP of every key of the model (spec, state, history, seen ids): what a snapshot
    taken now holds of it."""

    async def go(redis, keys):  # type: ignore[no-untyped-def]
        found = [k async for k in redis.scan_iter(match=f"{keys.prefix}model:{{{model}}}:*")]
        return {k: await redis.dump(k) for k in found}

    return redis_call(settings, go)  # type: ignore[no-any-return]


def _restore(settings: Settings, dumped: dict[bytes, bytes]) -> None:
    async def go(redis, keys):  # type: ignore[no-untyped-def]
        for k, v in dumped.items():
            await redis.restore(k, 0, v, replace=True)

    redis_call(settings, go)


def test_a_store_from_before_a_recreate_halts_that_model_not_its_partition(
    settings: Settings, stack: tuple[TestClient, WorkerProcess]
) -> None:
    client, worker = stack
    rng = np.random.default_rng(32)
    for mid in [BAD, *OTHERS]:
        assert (
            client.post("/v1/models", json={"id": mid, "kind": "pa", "dim": 2}).status_code == 201
        )
        _send(client, mid, "a", 10, rng)
    _wait(client, "the first 10 events learned", _applied(client, [BAD, *OTHERS], 10), worker)
    old = _snapshot(settings, BAD)
    assert any(k.endswith(b":spec") for k in old) and any(k.endswith(b":state") for k in old)

    # delete + re-create: a new incarnation, which learns its own 10 events
    assert client.delete(f"/v1/models/{BAD}").status_code == 204
    assert client.post("/v1/models", json={"id": BAD, "kind": "pa", "dim": 2}).status_code == 201
    _send(client, BAD, "b", 10, rng)
    _wait(client, "the new incarnation learns", _applied(client, [BAD], 10), worker)

    # Redis goes back to the snapshot: the old incarnation, its state before the new marker.
    # The running worker holds the new one; events the API now stamps with the restored
    # (old) incarnation are not its, and the partition goes on
    _restore(settings, old)
    _send(client, BAD, "c", 5, rng)
    for mid in OTHERS:
        _send(client, mid, "d", 10, rng)
    _wait(client, "the other models keep learning", _applied(client, OTHERS, 20), worker)

    # a cold start (the audit's kill -9 and restart) reloads the old incarnation from its
    # stamp, before the new marker: the replay meets that marker
    worker.kill()
    worker.start()
    for mid in OTHERS:
        _send(client, mid, "e", 10, rng)
    _wait(client, "the others learn after a restart", _applied(client, OTHERS, 30), worker)
    _wait(client, "the stale model halts", lambda: bool(_status(client, BAD)["halted"]), worker)
    reason = _status(client, BAD)["halted"]
    assert "older incarnation" in reason and "re-create" in reason, reason
    assert "ERROR" in worker.log_text() and "older incarnation" in worker.log_text()

    # the operator re-creates it: it learns again, from its new marker on
    assert client.delete(f"/v1/models/{BAD}").status_code == 204
    assert client.post("/v1/models", json={"id": BAD, "kind": "pa", "dim": 2}).status_code == 201
    _send(client, BAD, "f", 7, rng)
    for mid in OTHERS:
        _send(client, mid, "g", 10, rng)
    _wait(client, "the re-created model learns", _applied(client, [BAD], 7), worker)
    _wait(client, "and the others", _applied(client, OTHERS, 40), worker)
    assert _status(client, BAD)["halted"] is None
    assert worker.log_text().count("reloaded at version") < 10  # no reload loop


async def test_a_store_restart_from_before_a_recreate_halts_the_model_at_the_epoch_check() -> None:
    """The same hole through the other door, on the memory ports: Redis restarts from a
    snapshot taken before the delete + re-create (a new store epoch) while the worker holds
    the new incarnation and the model gets no more events. The epoch check reloads it and
    finds an incarnation older than the one it held: that model halts, the other one on
    its partition keeps learning, and re-creating it ends the halt."""
    from clients import wire
    from service.store.registry import created_marker, with_origin
    from service.worker.adapters.memory_log import MemoryBroker, MemoryLog
    from service.worker.adapters.memory_store import MemoryStore
    from service.worker.loop import Worker, take
    from tests.service.test_worker_ports import P0, P1, TOPIC, _run, _settings

    now = [0.0]
    settings = _settings(commit_interval_s=10.0, commit_every=1000)
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)

    def create(model: str, incarnation: str) -> None:  # as POST /v1/models does
        marker = wire.encode_value(created_marker(model, incarnation))
        rec = broker.append(TOPIC, marker, model.encode(), 0)
        spec = {"id": model, "kind": "pa", "dim": 2, "params": {}}
        store.create(with_origin(spec, incarnation, 0, rec.offset), topic=TOPIC)

    def send(model: str, prefix: str, n: int) -> None:  # all on partition 0
        for i in range(n):
            ev = wire.example(model, f"{prefix}{i}", [1.0, float(i % 5)], float(i % 3), ts=0.0)
            broker.append(TOPIC, wire.encode_value(ev), model.encode(), 0)

    create("a", "A")
    create("b", "B1")
    log = MemoryLog(broker)
    worker = Worker(settings, log, store, worker_id="sim", clock=lambda: now[0])
    await log.start()
    await log.subscribe(TOPIC, worker.rebalance)
    await log.rebalance([P0, P1])
    send("a", "a", 5)
    send("b", "b", 5)
    await _run(worker, log)
    snapshot = (dict(store.specs), dict(store.states), dict(store.seen), dict(store.histories))
    store.delete("a")
    create("a", "A2")
    send("a", "n", 4)
    await _run(worker, log)
    assert store.states["a"].counters.applied == 4 and worker.models["a"].incarnation == "A2"
    # Redis comes back from the snapshot: "a" is the deleted incarnation again
    store.specs, store.states, store.seen, store.histories = (dict(t) for t in snapshot)
    store.run += 1
    now[0] += settings.commit_interval_s
    await take(worker, {}, worker.assignment.generation)  # an empty poll: the store check
    send("b", "c", 5)
    await _run(worker, log)
    halted = store.halted.get("a")
    assert halted and "older incarnation" in halted, halted
    assert worker.models["a"].halted == halted
    assert store.states["b"].counters.applied == 10  # its partition went on
    # the operator re-creates it: the new marker ends the halt
    store.delete("a")
    create("a", "A3")
    send("a", "z", 3)
    await _run(worker, log)
    assert worker.models["a"].halted is None and store.states["a"].counters.applied == 3
    assert "a" not in store.halted
