"""Offset-stamped checkpoints and the spec registry against a real Redis."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from redis.asyncio import Redis

from service.store import registry
from service.store import seen as layout
from service.store.checkpoints import (
    BACKWARDS,
    CONFLICT,
    OK,
    CheckpointWrite,
    Counters,
    Stamp,
    id_hash,
    ids_sum,
    partition_models,
    read_history,
    read_seen,
    read_state,
    read_states,
    read_version,
    rollback,
    write_checkpoints,
)
from service.store.keys import Keys

pytestmark = pytest.mark.service
session_loop = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
async def store(redis_url: str, key_prefix: str):
    client = Redis.from_url(redis_url)
    yield client, Keys(f"{key_prefix}ck-{uuid.uuid4().hex[:6]}:")
    await client.aclose()


def _write(model: str, offset: int, version: int, blob: bytes = b"s", **kw) -> CheckpointWrite:
    return CheckpointWrite(
        model=model,
        topic="t",
        stamp=Stamp(kw.pop("partition", 0), offset, f"e{offset}"),
        state=blob,
        counters=kw.pop("counters", Counters(applied=offset + 1)),
        expected_version=version,
        **kw,
    )


@session_loop
async def test_write_then_read_roundtrip(store) -> None:
    r, keys = store
    blob = bytes(range(256)) * 3  # binary-safe
    c = Counters(applied=5, duplicate=2, rejected=1, ids_sum=ids_sum(["a", "b"]))
    res = await write_checkpoints(
        r, keys, [_write("m", 9, 0, blob, counters=c, stats=b"\x00st")], worker="w1"
    )
    assert res[0].outcome == OK and res[0].version == 1
    got = await read_state(r, keys, "m")
    assert got is not None
    assert got.state == blob and got.version == 1 and got.stamp == Stamp(0, 9, "e9")
    assert got.counters == c and got.stats == b"\x00st" and got.worker == "w1"
    assert await read_version(r, keys, "m") == 1
    assert await read_version(r, keys, "unknown") == 0
    assert await read_state(r, keys, "unknown") is None
    assert await partition_models(r, keys, "t", 0) == {"m"}


@session_loop
async def test_version_check_refuses_a_stale_writer(store) -> None:
    r, keys = store
    assert (await write_checkpoints(r, keys, [_write("m", 1, 0)]))[0].outcome == OK
    stale = await write_checkpoints(r, keys, [_write("m", 5, 0, b"stale")])
    assert stale[0].outcome == CONFLICT and stale[0].version == 1
    got = await read_state(r, keys, "m")
    assert got is not None and got.state == b"s" and got.stamp.offset == 1


@session_loop
async def test_stamp_never_goes_backwards_unless_rewound(store) -> None:
    r, keys = store
    await write_checkpoints(r, keys, [_write("m", 10, 0)])
    back = await write_checkpoints(r, keys, [_write("m", 4, 1)])
    assert back[0].outcome == BACKWARDS
    assert (await read_state(r, keys, "m")).stamp.offset == 10
    same = await write_checkpoints(r, keys, [_write("m", 10, 1)])
    assert same[0].outcome == OK  # equal offset (e.g. counters only) is allowed
    rewound = await write_checkpoints(r, keys, [_write("m", 3, 2, rewind=True)])
    assert rewound[0].outcome == OK
    assert (await read_state(r, keys, "m")).stamp.offset == 3


@session_loop
async def test_pipelined_writes_are_independent_per_model(store) -> None:
    r, keys = store
    await write_checkpoints(r, keys, [_write("a", 1, 0)])
    res = await write_checkpoints(
        r, keys, [_write("a", 2, 0), _write("b", 3, 0, partition=1), _write("c", 4, 0)]
    )
    assert [x.outcome for x in res] == [CONFLICT, OK, OK]
    states = await read_states(r, keys, ["a", "b", "c", "d"])
    assert states["a"].stamp.offset == 1 and states["b"].stamp == Stamp(1, 3, "e3")
    assert states["d"] is None
    assert await partition_models(r, keys, "t", 1) == {"b"}


@session_loop
async def test_history_keeps_last_k_and_rollback_restores(store) -> None:
    r, keys = store
    for v in range(5):
        await write_checkpoints(r, keys, [_write("m", v, v, b"v%d" % v)], history_keep=3)
    hist = await read_history(r, keys, "m")
    assert [h.version for h in hist] == [5, 4, 3]
    assert [h.state for h in hist] == [b"v4", b"v3", b"v2"]
    nv = await rollback(r, keys, "m", 4)
    got = await read_state(r, keys, "m")
    assert nv == 6 and got.version == 6 and got.state == b"v3" and got.stamp.offset == 4
    with pytest.raises(KeyError):
        await rollback(r, keys, "m", 1)
    # the owner's next write (loaded version 5) now conflicts and changes nothing
    assert (await write_checkpoints(r, keys, [_write("m", 9, 5)]))[0].outcome == CONFLICT


@session_loop
async def test_seen_ids_are_kept_newest_first_trimmed(store) -> None:
    r, keys = store
    ids = [(i + 1, f"id{i}") for i in range(8)]
    seen = layout.new_records
    await write_checkpoints(r, keys, [_write("m", 1, 0, seen=seen(ids[:5]))], seen_keep=6)
    await write_checkpoints(r, keys, [_write("m", 2, 1, seen=seen(ids[5:]))], seen_keep=6)
    assert await read_seen(r, keys, "m", 6) == layout.of_ids(ids[2:])
    assert await r.strlen(keys.seen("m")) == 8 + 16 * 6  # 8 > 6 + 6 // 4: trimmed to 6
    counts = []
    for k in range(8, 12):  # trimmed again each time it holds more than 7
        w = _write("m", k, k - 6, seen=seen([(k + 1, f"id{k}")]))
        assert (await write_checkpoints(r, keys, [w], seen_keep=6))[0].outcome == OK
        counts.append((await r.strlen(keys.seen("m")) - 8) // 16)
    assert counts == [7, 6, 7, 6]
    newest = [(i + 1, f"id{i}") for i in range(6, 12)]
    assert await read_seen(r, keys, "m", 6) == layout.of_ids(newest)
    assert (await read_seen(r, keys, "m", 6)).upto(9) == layout.of_ids(
        [(i + 1, f"id{i}") for i in range(6, 9)]
    )


@session_loop
async def test_a_seen_window_in_the_old_layout_is_read_then_replaced(store) -> None:
    r, keys = store
    await write_checkpoints(r, keys, [_write("old", 1, 0)], seen_keep=6)
    await r.zadd(keys.seen("old"), {"a": 1, "b": 2, "c": 3})  # as an older worker left it
    got = await read_seen(r, keys, "old", 6)
    assert (
        got.legacy
        and got.digests.tolist() == layout.of_ids([(1, "a"), (2, "b"), (3, "c")]).digests.tolist()
    )
    # an append onto it is refused as a conflict and changes nothing (the writer reloads)
    w = _write("old", 2, 1, seen=layout.new_records([(4, "d")]))
    assert (await write_checkpoints(r, keys, [w], seen_keep=6))[0].outcome == CONFLICT
    assert await r.type(keys.seen("old")) == b"zset"
    whole = layout.encode(layout.of_ids([(2, "b"), (3, "c"), (4, "d")]))
    w = _write("old", 2, 1, seen=whole, seen_whole=True)
    assert (await write_checkpoints(r, keys, [w], seen_keep=6))[0].outcome == OK
    assert await r.get(keys.seen("old")) == whole


def test_ids_sum_is_order_independent_and_counts_multiplicity() -> None:
    assert ids_sum(["a", "b", "c"]) == ids_sum(["c", "a", "b"])
    assert ids_sum(["a", "b", "b"]) != ids_sum(["a", "b"])
    assert id_hash("a") != id_hash("b")


def test_id_digests_are_blake2b_8_bytes_little_endian() -> None:
    """Stored in Redis (``ids_sum``, the seen window): the values must never change."""
    ids = ["e1", "", "é-ü", "x" * 200, "e1"]
    want = [
        int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "little") for i in ids
    ]
    assert [id_hash(i) for i in ids] == want
    assert layout.digests(ids).tolist() == want
    assert id_hash("e1") == 292540415853092123


@session_loop
async def test_registry_crud(store) -> None:
    r, keys = store
    spec = {"id": "m1", "kind": "pa", "dim": 3, "params": {"C": 0.5}}
    assert await registry.create_spec(r, keys, spec)
    assert not await registry.create_spec(r, keys, {**spec, "dim": 4})
    assert await registry.get_spec(r, keys, "m1") == spec
    await registry.create_spec(r, keys, {**spec, "id": "m0"})
    assert [s["id"] for s in await registry.list_specs(r, keys)] == ["m0", "m1"]
    await write_checkpoints(r, keys, [_write("m1", 1, 0)])
    assert await registry.delete_spec(r, keys, "m1")
    assert await registry.get_spec(r, keys, "m1") is None
    assert await read_state(r, keys, "m1") is None
    assert not await registry.delete_spec(r, keys, "m1")
    assert [s["id"] for s in await registry.list_specs(r, keys)] == ["m0"]


@session_loop
async def test_rebase_on_a_new_log_keeps_the_state_and_reads_the_new_log_from_its_start(
    store,
) -> None:
    from service.store.newlog import BEFORE_START, rebase_on_new_log

    r, keys = store
    origin = {"partition": 1, "offset": 7, "event_id": "created:i1"}
    for model in ("learned", "fresh"):
        spec = {"id": model, "kind": "pa", "dim": 2, "incarnation": "i1", "origin": origin}
        assert await registry.create_spec(r, keys, spec)
    c = Counters(applied=3, ids_sum=ids_sum(["a", "b", "c"]))
    ids = [(1, "a"), (2, "b"), (3, "c")]
    seen = layout.new_records(ids)
    w = _write("learned", 40, 0, b"state", partition=1, counters=c, seen=seen, incarnation="i1")
    assert (await write_checkpoints(r, keys, [w], worker="w1"))[0].outcome == OK
    await r.hset(keys.state("learned"), "halted", "the log diverged")
    before = await read_state(r, keys, "learned")
    assert before is not None and await read_history(r, keys, "learned")

    assert await rebase_on_new_log(r, keys) == ["learned"]

    after = await read_state(r, keys, "learned")
    assert after is not None and after.stamp == Stamp(1, BEFORE_START, "")
    assert after.version == before.version + 1 and after.token != before.token
    assert (after.state, after.counters) == (b"state", c)  # what it learned is kept
    assert await read_seen(r, keys, "learned", 10) == layout.of_ids(ids)  # and its dedupe
    assert await read_history(r, keys, "learned") == []  # old-log stamps: not resumable
    assert not await r.hexists(keys.state("learned"), "halted")
    assert await read_state(r, keys, "fresh") is None  # no checkpoint: none made up
    for model in ("learned", "fresh"):
        spec = await registry.get_spec(r, keys, model)
        assert spec is not None and spec["origin"] == {**origin, "offset": BEFORE_START}
    assert await rebase_on_new_log(r, keys) == ["learned"]  # again: the same place
    again = await read_state(r, keys, "learned")
    assert again is not None and again.stamp == after.stamp
