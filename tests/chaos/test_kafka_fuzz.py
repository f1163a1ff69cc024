"""Hostile records on the events topic: a fuzz producer interleaves random bytes,
truncated JSON, wrong dimensions, NaN/inf, huge vectors, unknown models, wrong types,
broken binary frames, key/model mismatches, tombstones and duplicate ids with valid
events. The worker process never stops, every bad record lands in the dead-letter topic
with a reason (exactly those records: no valid one), every valid one is learned (state
bit-identical to a replay of the valid events alone) and duplicate ids are dropped, not
dead-lettered.

Poison pills (records that would kill a naive worker on every restart at the same
offset) are in ``test_poison_record_does_not_stop_the_worker``.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

import learners
from clients import wire
from learners.codec import encode_state
from service.store.checkpoints import ids_sum
from service.store.keys import Keys
from service.worker.loop import run_worker
from tests.service.conftest import FAST, WorkerProcess, produce, read_topic, run, wait_for

pytestmark = [pytest.mark.service]

SPECS = {
    "fz-reg": {"id": "fz-reg", "kind": "pa", "dim": 3, "params": {}},
    "fz-cls": {"id": "fz-cls", "kind": "arow", "dim": 2, "params": {}},
    "fz-rls": {"id": "fz-rls", "kind": "rls", "dim": 4, "params": {}},
}
N_VALID = 1500
BAD_EVERY = 3  # about one hostile record per three valid ones


def _valid(rng: random.Random, model: str, i: int) -> dict[str, Any]:
    spec = SPECS[model]
    x = [round(rng.gauss(0, 1), 6) for _ in range(spec["dim"])]
    s = sum((k + 1) * v for k, v in enumerate(x))
    y: Any = 1 if s > 0 else -1
    if model != "fz-cls":
        y = s + rng.gauss(0, 0.1)
    return {"model": model, "id": f"ok-{i}", "x": x, "y": y}


def _ev(model: str, **fields: Any) -> bytes:
    return json.dumps({"model": model, "id": f"bad-{random.random()}", **fields}).encode()


def _hostile(rng: random.Random, good: dict[str, Any]) -> tuple[str, bytes | None, bytes | None]:
    """(category, key, value) of one bad record, built from a valid event ``good``."""
    m = good["model"]
    k = m.encode()
    dim = SPECS[m]["dim"]
    raw = json.dumps(good).encode()
    choice = rng.randrange(21)
    if choice == 0:
        return "random-bytes", k, rng.randbytes(rng.randrange(1, 400))
    if choice == 1:
        return "random-bytes-random-key", rng.randbytes(8), rng.randbytes(rng.randrange(1, 400))
    if choice == 2:
        return "truncated-json", k, raw[: rng.randrange(1, len(raw) - 1)]
    if choice == 3:
        return "wrong-dim", k, _ev(m, x=[1.0] * (dim + rng.randrange(1, 5)), y=1)
    if choice == 4:
        bad = rng.choice(["NaN", "Infinity", "-Infinity"])
        x = ", ".join([bad] + ["0.5"] * (dim - 1))
        return (
            "nan-inf-x",
            k,
            f'{{"model": "{m}", "id": "nan{rng.random()}", "x": [{x}], "y": 1}}'.encode(),
        )
    if choice == 5:
        return "huge-vector", k, _ev(m, x=[0.25] * 20_000, y=1)
    if choice == 6:
        return "unknown-model", b"nobody", _ev("nobody", x=[1.0] * dim, y=1)
    if choice == 7:
        return "key-mismatch", b"fz-other", raw
    if choice == 8:
        return "tombstone", k, None
    if choice == 9:
        return "empty-value", k, b""
    if choice == 10:
        return "not-an-object", k, rng.choice([b"[1,2,3]", b"42", b'"str"', b"null", b"true"])
    if choice == 11:
        return "x-not-numbers", k, _ev(m, x=rng.choice(["abc", [["1"]], ["a"] * dim, {}, []]), y=1)
    if choice == 12:
        y = rng.choice(["1.0", [1], {"v": 1}])
        return "y-wrong-type", k, _ev(m, x=[1.0] * dim, y=y)
    if choice == 13:
        return "missing-id", k, json.dumps({"model": m, "x": [1.0] * dim, "y": 1}).encode()
    if choice == 14:
        return "id-too-long", k, json.dumps({**good, "id": "i" * 300}).encode()
    if choice == 15:
        return "bad-ts-hint", k, raw[:-1] + rng.choice([b', "ts": "now"}', b', "hint": Infinity}'])
    if choice == 16:
        label = 0.5 if m == "fz-cls" else True  # not a class label / a boolean regression target
        return "bad-label", k, _ev(m, x=[1.0] * dim, y=label)
    if choice == 20:  # a binary frame (docs/events.md §6), one row so ``processed`` counts it once
        return _hostile_frame(rng, m, dim)
    if choice == 18:
        return "deep-nesting", k, b"[" * rng.randrange(2_000, 200_000)
    if choice == 19:  # an integer beyond float range, in x, y or ts
        big = b"1" + b"0" * rng.randrange(310, 6000)
        field = rng.choice([b'"x": [' + big + b"]", b'"x": [1], "y": ' + big, b'"ts": ' + big])
        return "huge-integer", k, b'{"model": "' + m.encode() + b'", "id": "h", ' + field + b"}"
    return "non-utf8", k, b'{"model": "' + m.encode() + b'", "id": "\xff\xfe", "x": [1]}'


def _hostile_frame(rng: random.Random, m: str, dim: int) -> tuple[str, bytes, bytes]:
    fid = [f"frame-{rng.random()}"]
    ok = wire.encode_frame(m, fid, [[0.5] * dim], [1.0])
    kind = rng.randrange(5)
    if kind == 0:
        return "frame-random-tail", m.encode(), wire.FRAME_MAGIC + rng.randbytes(rng.randrange(400))
    if kind == 1:
        return "frame-truncated", m.encode(), ok[: rng.randrange(4, len(ok))]
    if kind == 2:
        bad = rng.choice([float("nan"), float("inf"), 1e200])
        return "frame-bad-value", m.encode(), wire.encode_frame(m, fid, [[bad] * dim], [1.0])
    if kind == 3:
        return "frame-wrong-dim", m.encode(), wire.encode_frame(m, fid, [[0.5] * (dim + 1)], [1.0])
    v = bytearray(ok)
    at = rng.choice([4, 7, *range(8, 16), *range(24, 32)])  # not ts, nor kind 0 -> 1 (valid)
    v[at] ^= 1 << rng.randrange(8)  # a flipped header bit: version, reserved, n, d, lengths
    return "frame-bad-header", m.encode(), bytes(v)


def _stream(seed: int) -> tuple[list[tuple[bytes | None, bytes | None]], list[str], list]:
    """Records (key, value) in send order, the category of each (``valid``/``duplicate``
    for the good ones) and the valid events."""
    rng = random.Random(seed)
    models = sorted(SPECS)
    records: list[tuple[bytes | None, bytes | None]] = []
    cats: list[str] = []
    valid: list[dict[str, Any]] = []
    for i in range(N_VALID):
        good = _valid(rng, models[rng.randrange(len(models))], i)
        if i % BAD_EVERY == 0:
            cat, key, value = _hostile(rng, good)
            records.append((key, value))
            cats.append(cat)
        records.append((good["model"].encode(), json.dumps(good).encode()))
        cats.append("valid")
        valid.append(good)
        if i % 40 == 7:  # a duplicate id (same payload) a little later
            dup = valid[rng.randrange(max(0, len(valid) - 30), len(valid))]
            records.append((dup["model"].encode(), json.dumps(dup).encode()))
            cats.append("duplicate")
    return records, cats, valid


def _register(r: redis_lib.Redis, keys: Keys) -> None:
    for spec in SPECS.values():
        r.set(keys.spec(spec["id"]), json.dumps(spec))
        r.sadd(keys.models(), spec["id"])


def test_fuzzed_records_are_dead_lettered_and_valid_ones_learned(
    make_settings, redis_url: str, tmp_path: Path
) -> None:
    st = make_settings(**FAST)
    r, keys = redis_lib.Redis.from_url(redis_url), Keys(st.key_prefix)
    _register(r, keys)
    records, cats, valid = _stream(seed=8)
    worker = WorkerProcess(st, "fuzz", tmp_path)
    worker.start()
    try:
        for i in range(0, len(records), 250):  # in slices, so the worker sees a live stream
            run(produce(st, records[i : i + 250], raw=True))
            assert worker.alive(), worker.log_text()[-3000:]

        def done() -> bool:
            assert worker.alive(), worker.log_text()[-3000:]
            return int(r.hget(keys.worker("fuzz-0"), "processed") or 0) >= len(records)

        wait_for(done, 120, "the worker to handle every record")
        assert worker.stop() == 0
    finally:
        worker.kill()

    log = run(read_topic(st, st.events_topic))
    assert len(log) == len(records)
    # which log position holds which category: match each record's bytes in send order
    by_content: dict[tuple[bytes | None, bytes | None], list[str]] = {}
    for rec, cat in zip(records, cats, strict=True):
        by_content.setdefault(rec, []).append(cat)
    bad_positions = set()
    for p, off, key, value in log:
        cat = by_content[(key, value)][0]
        if cat not in ("valid", "duplicate"):
            bad_positions.add((p, off))
    letters = [json.loads(v) for _, _, _, v in run(read_topic(st, st.deadletter_topic))]
    dead = {(d["partition"], d["offset"]) for d in letters}
    assert dead == bad_positions, (len(dead), len(bad_positions))
    assert all(isinstance(d["reason"], str) and d["reason"] for d in letters)

    # the valid events, learned exactly once each, bit for bit
    for m, spec in SPECS.items():
        ref = learners.build(spec["kind"], spec["dim"])
        ids = []
        for ev in valid:
            if ev["model"] == m:
                ref.learn(ev["x"], ev["y"])
                ids.append(ev["id"])
        h = r.hgetall(keys.state(m))
        assert h[b"state"] == encode_state(ref.state()), m
        assert int(h[b"applied"]) == len(ids) and int(h[b"ids_sum"]) == ids_sum(ids), m
    dups = sum(1 for c in cats if c == "duplicate")
    assert sum(int(r.hget(keys.state(m), "duplicate")) for m in SPECS) == dups
    seen_cats = sorted({c for c in cats if c not in ("valid", "duplicate")})
    print(
        f"\nkafka fuzz: {len(records)} records, {len(bad_positions)} hostile in "
        f"{len(seen_cats)} categories {seen_cats}, {dups} duplicate ids, {len(letters)} dead "
        f"letters, {len(valid)} valid learned"
    )
    r.close()


# Records that used to escape the worker's validation (fixed in afb341a): the exception left
# the worker loop, and a restarted worker read the same record again (a poison pill).
POISON = {
    "deeply-nested-json": b"[" * 100_000,
    "int-too-large-for-float-in-x": b'{"model":"fz-reg","id":"p1","x":[1'
    + b"0" * 400
    + b',0,0],"y":1}',
    "int-over-4300-digits": b'{"model":"fz-reg","id":"p2","x":[1' + b"0" * 5000 + b',0,0],"y":1}',
    "int-too-large-for-float-in-y": b'{"model":"fz-reg","id":"p3","x":[1,0,0],"y":1'
    + b"0" * 400
    + b"}",
    "int-too-large-for-float-in-ts": b'{"model":"fz-reg","id":"p4","x":[1,0,0],"y":1,"ts":1'
    + b"0" * 400
    + b"}",
}


@pytest.mark.parametrize("name", sorted(POISON))
async def test_poison_record_does_not_stop_the_worker(make_settings, redis_url, name) -> None:  # type: ignore[no-untyped-def]
    st = make_settings(**FAST)
    r, keys = redis_lib.Redis.from_url(redis_url), Keys(st.key_prefix)
    _register(r, keys)
    after = {"model": "fz-reg", "id": "after", "x": [1.0, 2.0, 3.0], "y": 1.0}
    await produce(
        st, [(b"fz-reg", POISON[name]), (b"fz-reg", json.dumps(after).encode())], raw=True
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(st, stop=stop, worker_id=f"poison-{name}"))
    try:
        async with asyncio.timeout(60):
            while int(r.hget(keys.state("fz-reg"), "applied") or 0) < 1:
                if task.done():
                    task.result()  # re-raises what killed the worker
                    raise AssertionError("the worker stopped")
                await asyncio.sleep(0.1)
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        r.close()
    letters = await read_topic(st, st.deadletter_topic)
    assert len(letters) == 1 and json.loads(letters[0][3])["reason"]
