"""Every Lua script of the service keeps its keys in one Redis Cluster slot (issue 15).

Each script's real caller runs against a real cluster (``redis_cluster``) while the client
records every ``EVAL``/``EVALSHA`` it sends, directly or queued on a pipeline; each must name
keys of one slot, for model ids that stress the ``{id}`` hash tag. The scripts found by
``register_script`` in ``service/`` must all have been seen, so a new script cannot escape
the check. The same calls then run on one ``redis-server`` too, where the slot rule is not
enforced by the server: the recorded keys are checked all the same.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot

from service.api.redis_access import RedisAccess
from service.store import registry
from service.store import seen as seen_layout
from service.store.checkpoints import (
    CheckpointWrite,
    Counters,
    Stamp,
    read_seens,
    rollback,
    write_checkpoints,
)
from service.store.connect import store_epoch
from service.store.keys import Keys
from service.store.newlog import rebase_on_new_log

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]
# ids the API accepts (``[A-Za-z0-9][A-Za-z0-9._-]*``) and ones it does not, but a direct
# store user might pass: the hash tag must hold for all of them
MODEL_IDS = ["m1", "model.with-dots_9", "a}b", "{x}", "with:colons"]


def _registered_scripts() -> dict[str, str]:
    """sha1 -> ``module.CONSTANT`` of every ``register_script(<constant>)`` in service/."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "service").rglob("*.py")):
        if "node_modules" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "register_script"
            ):
                (arg,) = node.args
                assert isinstance(arg, ast.Name), f"{path}: register_script of a non-constant"
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                body = getattr(importlib.import_module(module), arg.id)
                out[hashlib.sha1(body.encode()).hexdigest()] = f"{module}.{arg.id}"
    return out


class Recorder:
    """Wraps a client's ``execute_command`` (and its pipelines') to keep each script call's
    ``(sha1 of the script, keys)``."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []
        self._wrap(client)
        make_pipe = client.pipeline

        def pipeline(*a: Any, **kw: Any) -> Any:
            return self._wrap(make_pipe(*a, **kw))

        client.pipeline = pipeline

    def _wrap(self, target: Any) -> Any:
        inner = target.execute_command

        def execute_command(*args: Any, **kw: Any) -> Any:
            name = str(args[0]).upper()
            if name in ("EVAL", "EVALSHA"):
                script = args[1].encode() if isinstance(args[1], str) else args[1]
                sha = script.decode() if name == "EVALSHA" else hashlib.sha1(script).hexdigest()
                n = int(args[2])
                keys = [k.encode() if isinstance(k, str) else k for k in args[3 : 3 + n]]
                self.calls.append((sha, keys))
            return inner(*args, **kw)

        target.execute_command = execute_command
        return target


async def _exercise(client: Any, keys: Keys) -> None:
    """Every script caller, for every model id."""
    access = RedisAccess(client, keys)
    for n, model in enumerate(MODEL_IDS):
        spec = {"id": model, "kind": "pa", "dim": 2, "params": {}, "incarnation": "i"}
        assert await registry.create_spec(client, keys, spec, topic="t")
        write = CheckpointWrite(
            model=model,
            topic="t",
            stamp=Stamp(n % 2, 5, "e5"),
            state=b"state",
            counters=Counters(applied=2),
            expected_version=0,
            seen=seen_layout.encode(seen_layout.of_ids([(1, "a"), (2, "b")])),
            seen_whole=True,
            incarnation="i",
            token="t1",
        )
        (res,) = await write_checkpoints(client, keys, [write], extra=lambda p: p.incr("x"))
        assert res.outcome == "ok", res
        window = (await read_seens(client, keys, [model], 10))[model]
        assert window == seen_layout.of_ids([(1, "a"), (2, "b")])
        assert await rollback(client, keys, model, 1) == 2
        rows = np.array([[1.0, 2.0], [3.0, 4.0]])
        b1, b2 = "1" * 32, "2" * 32  # batch records: predictions <batch>.<row>
        await access.save_predictions(model, b1, rows, [None, 0.5], 2, 60)
        sha = hashlib.sha1(registry._encode(spec).encode()).hexdigest()
        stored = await access.store_checked_predictions(model, sha, b2, rows[1:], [None], 60)
        assert stored is not None and (stored[0], stored[2]) == (2, None) and stored[1]
        claim = await access.claim_prediction(model, f"{b1}.1", "1.0", None)
        assert claim is not None and claim.state == "new"
        assert (claim.x, claim.hint) == ([3.0, 4.0], 0.5)
        claim = await access.claim_prediction(model, f"{b2}.0", "1.0", None)
        assert claim is not None and (claim.x, claim.hint) == ([3.0, 4.0], None)
        claim = await access.claim_prediction(model, f"{b1}.0", "1.0", None)
        assert claim is not None and claim.state == "new" and claim.x == [1.0, 2.0]
        await access.label_done(model, f"{b1}.0")
        # a per-row record of the layout before batch records (a rolling upgrade)
        legacy = {"xf64": rows[0].tobytes(), "hint": "null"}
        await client.hset(keys.prediction(model, "p1"), mapping=legacy)
        claim = await access.claim_prediction(model, "p1", "1.0", None)
        assert claim is not None and claim.state == "new" and claim.x == [1.0, 2.0]
        await access.label_done(model, "p1")
        assert await access.delete_model(model, topic="t")
        assert await registry.create_spec(client, keys, spec, topic="t")
    # windows of many slots in one read, one still in the old layout (a sorted set)
    legacy = f"legacy-{MODEL_IDS[0]}"
    await client.zadd(keys.seen(legacy), {"a": 1, "b": 2})
    got = await read_seens(client, keys, [*MODEL_IDS, legacy], 10)
    assert got[legacy] == seen_layout.from_ids([("a", 1.0), ("b", 2.0)])
    assert all(len(got[m]) == 0 for m in MODEL_IDS)  # deleted with the models
    await client.delete(keys.seen(legacy))
    assert sorted(await rebase_on_new_log(client, keys)) == []  # no stamps left: specs only
    assert sorted(await registry.list_model_ids(client, keys)) == sorted(MODEL_IDS)
    specs = await registry.get_specs(client, keys, MODEL_IDS)  # cross-slot read
    assert sorted(specs) == sorted(MODEL_IDS)
    for model in MODEL_IDS:
        await access.delete_model(model, topic="t")


def _check(recorder: Recorder) -> None:
    scripts = _registered_scripts()
    assert len(scripts) >= 7, scripts  # the checkpoint, rollback, rebase and 4 API scripts
    for sha, keys in recorder.calls:
        assert sha in scripts, f"a script not found by register_script: {sha}"
        slots = {key_slot(k) for k in keys}
        assert len(slots) == 1, f"{scripts[sha]} spans slots {slots} with keys {keys}"
    missing = set(scripts) - {sha for sha, _ in recorder.calls}
    assert not missing, f"scripts never exercised: {[scripts[s] for s in missing]}"


@pytest.fixture
def cluster_client(redis_cluster: Any) -> Iterator[RedisCluster]:
    yield RedisCluster.from_url(redis_cluster.url)


@pytest.mark.parametrize("mode", ["cluster", "standalone"])
async def test_every_script_keeps_its_keys_in_one_slot(
    mode: str, request: pytest.FixtureRequest, key_prefix: str
) -> None:
    client: Redis | RedisCluster = (
        request.getfixturevalue("cluster_client")
        if mode == "cluster"
        else Redis.from_url(request.getfixturevalue("redis_url"))
    )
    keys = Keys(f"{key_prefix}slots-{uuid.uuid4().hex[:6]}:")
    recorder = Recorder(client)
    try:
        await _exercise(client, keys)
    finally:
        await client.aclose()
    _check(recorder)


async def test_the_store_epoch_changes_when_any_master_fails_over(
    redis_cluster: Any, cluster_client: RedisCluster
) -> None:
    """A replica that takes over one shard changes the epoch the workers' audit compares
    (docs/reliability.md, "Delivery guarantees")."""
    try:
        before = await store_epoch(cluster_client)
        assert len(before.split(",")) == 3  # one run_id per master
        assert before == await store_epoch(cluster_client)
        redis_cluster.kill_master_of(0)
        after = None
        for _ in range(100):  # the client finds the new master through its slot map refresh
            try:
                after = await store_epoch(cluster_client)
                break
            except Exception:  # noqa: BLE001 - the dead node, until the map is refreshed
                continue
        assert after is not None and after != before and len(after.split(",")) == 3
        assert len(set(before.split(",")) & set(after.split(","))) == 2  # one shard changed
    finally:
        await cluster_client.aclose()
