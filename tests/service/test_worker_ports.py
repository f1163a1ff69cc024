"""The worker's ports without a broker: ``Assignment``, the in-memory log and store, and the
real loop and checkpoint code driven over them (docs/design.md, "Worker process").

One test holds the in-memory store against the Redis store (a real Redis, no broker).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from clients import wire
from service.config import Settings
from service.store import seen as layout
from service.store.checkpoints import (
    BACKWARDS,
    CONFLICT,
    OK,
    CheckpointWrite,
    Counters,
    Stamp,
    ids_sum,
)
from service.store.keys import Keys
from service.worker.adapters.memory_log import MemoryBroker, MemoryLog
from service.worker.adapters.memory_store import MemoryStore
from service.worker.adapters.redis_store import RedisStore, StopAwareRetry
from service.worker.assignment import Assignment
from service.worker.loop import Worker, take
from service.worker.ports import CommitFailed, Probe, StoreUnavailable, TopicPartition
from service.worker.telemetry import WorkerStats

TOPIC = "events"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
DEAD = TopicPartition("dead", 0)


class Recorder:
    """A rebalance listener that only records what it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, set[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.heard.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.heard.append(("assigned", assigned))


async def _log(records: dict[int, int], partitions: int = 2) -> tuple[MemoryBroker, MemoryLog]:
    broker = MemoryBroker({TOPIC: partitions})
    for p, n in records.items():
        for i in range(n):
            broker.append(TOPIC, f"r{p}-{i}".encode(), partition=p)
    log = MemoryLog(broker)
    await log.subscribe(TOPIC, Recorder())
    return broker, log


# --- Assignment ---------------------------------------------------------------------------


async def test_assignment_seek_moves_the_log_the_next_offset_and_the_generation() -> None:
    broker, log = await _log({0: 10, 1: 10})
    await log.rebalance([P0, P1])
    a = Assignment(log)
    a.seek(P0, 4)
    assert (await log.position(P0), a.next_offset[P0], a.generation) == (4, 4, 1)
    batch = await log.getmany(timeout_ms=0, max_records=3)
    assert [r.offset for r in batch[P0]] == [4, 5, 6]
    a.changed()
    assert a.generation == 2
    # a stale batch goes back to the next offset expected, for known partitions only
    a.refetch(batch)
    assert (await log.position(P0), a.generation) == (4, 3)
    a.forget([P0])
    assert P0 not in a.next_offset
    await log.getmany(timeout_ms=0, max_records=2)
    a.refetch({P0: [], P1: []})  # nothing expected on either: nothing sought
    assert (await log.position(P0), a.generation) == (6, 3)


async def test_assignment_lags_need_a_fetch_and_a_position() -> None:
    broker, log = await _log({0: 9, 1: 5})
    await log.rebalance([P0, P1])
    a = Assignment(log)
    a.seek(P0, 2)
    assert a.lags(TOPIC) == []  # no fetch answered yet
    await log.getmany(timeout_ms=0, max_records=1)
    assert a.lags(TOPIC) == [(0, 7)]  # partition 1: no position yet
    a.seek(P1, 5)
    assert a.lags(TOPIC) == [(0, 7), (1, 0)]
    assert a.lags("other") == []


# --- the in-memory log --------------------------------------------------------------------


async def test_memory_log_follows_the_brokers_rules() -> None:
    broker, log = await _log({0: 5, 1: 3})
    listener = log.listener
    assert isinstance(listener, Recorder)
    broker.committed[P1] = 2
    await log.rebalance([P0, P1])
    assert listener.heard == [("revoked", set()), ("assigned", {P0, P1})]
    assert (await log.position(P0), await log.position(P1)) == (0, 2)  # committed, else begin
    batch = await log.getmany(timeout_ms=0, max_records=4)
    assert {tp: [r.offset for r in rs] for tp, rs in batch.items()} == {P0: [0, 1, 2, 3]}
    batch = await log.getmany(timeout_ms=0, max_records=4)
    assert {tp: [r.offset for r in rs] for tp, rs in batch.items()} == {P0: [4], P1: [2]}
    assert await log.getmany(timeout_ms=0, max_records=4) == {}
    assert (log.highwater(P0), log.highwater(P1)) == (5, 3)
    # the probe: the record, or past the end (also below a truncated start)
    rec = await log.read_at(P0, 3)
    assert not isinstance(rec, Probe) and (rec.offset, rec.value) == (3, b"r0-3")
    assert await log.read_at(P0, 5) is Probe.PAST_END
    broker.truncate(P0, 2)
    assert await log.beginning_offset(P0) == 2
    assert await log.read_at(P0, 1) is Probe.PAST_END
    # a rebalance revokes everything, then assigns the new set
    await log.rebalance([P1])
    assert listener.heard[-2:] == [("revoked", {P0, P1}), ("assigned", {P1})]
    with pytest.raises(RuntimeError):
        log.seek(P0, 0)
    with pytest.raises(CommitFailed):
        await log.commit({P0: 1})
    await log.commit({P1: 3})
    assert await log.committed(P1) == 3
    # a reset partition starts over at 0 and forgets its committed offset
    broker.reset(P1)
    assert (broker.end(P1), await log.committed(P1)) == (0, None)
    # produce: by key, into a topic made on first use; delivered at once
    delivered = await log.produce("dead", b"letter", b"k")
    assert (await delivered).offset == 0
    assert [r.value for r in broker.records[TopicPartition("dead", 0)]] == [b"letter"]


# --- the in-memory store ------------------------------------------------------------------


def _write(model: str, offset: int, version: int, **kw: Any) -> CheckpointWrite:
    partition = kw.pop("partition", 0)
    applied = kw.pop("applied", offset + 1)
    kw.setdefault("token", f"{model}@{offset}")
    return CheckpointWrite(
        model=model,
        topic=TOPIC,
        stamp=Stamp(partition, offset, f"e{offset}"),
        state=f"state@{offset}".encode(),
        counters=Counters(applied=applied, ids_sum=applied),
        expected_version=version,
        stats=kw.pop("stats", b"stats"),
        **kw,
    )


_recs = layout.new_records  # the seen records a write appends

# A script of checkpoint writes: (write, the outcome both stores must give).
# Each write names the token of the version it expects (``expected_token``, the ``token`` of
# the write that made it) and sets its own (``m@7``: model m, stamp offset 7).
SCRIPT: list[tuple[CheckpointWrite, str]] = [
    (_write("m", 3, 0, seen=_recs([(1, "a"), (2, "b"), (3, "c"), (4, "d")])), OK),
    (_write("m", 5, 0), CONFLICT),  # lost the version check
    (_write("m", 2, 1, expected_token="m@3"), BACKWARDS),  # behind the stored stamp
    # the right version number from another lineage (Redis issued it again after losing
    # writes): the token tells them apart
    (_write("m", 6, 1, expected_token="m@5"), CONFLICT),
    (
        _write("m", 7, 1, expected_token="m@3", seen=_recs([(5, "e"), (6, "f")]), stats=b""),
        OK,
    ),
    (_write("m", 1, 2, expected_token="m@7", partition=1), OK),  # another partition
    # a rollback to version 1 (applied 4): the stamp goes back on purpose, later ids unseen
    (
        _write(
            "m",
            3,
            3,
            expected_token="m@1",
            rewind=True,
            applied=4,
            seen=layout.encode(layout.of_ids([(3, "c"), (4, "d")])),  # the window at 4
            seen_whole=True,
            barrier=Stamp(0, 9, "rb"),
        ),
        OK,
    ),
    (
        _write("m", 4, 4, expected_token="m@3", seen=_recs([(5, "g")]), barrier=Stamp(0, 9, "rb")),
        OK,
    ),
    (_write("n", 0, 0, partition=1, seen=_recs([(1, "z")])), OK),
]


async def _play(store: Any) -> list[tuple[str, int]]:
    out = []
    for w, _ in SCRIPT:
        (res,) = await store.write([w], worker_stats={"applied": "1"}, deadletters=1)
        out.append((res.outcome, res.version))
    return out


async def _snapshot(store: Any) -> dict[str, Any]:
    loaded = await store.load(["m", "n", "gone"])
    states = {
        m: (s.version, s.stamp, s.counters, s.state, s.stats, s.barrier, s.token)
        for m, s in loaded.states.items()
        if s is not None
    }
    history = {}
    for v in range(1, 7):
        e = await store.history_entry("m", v)
        history[v] = None if e is None else (e.version, e.stamp, e.state, e.counters, e.stats)
    return {
        "specs": sorted(loaded.specs),
        "states": states,
        "seen": loaded.seen,
        "seen_upto": await store.seen_upto("m", 4),
        "history": history,
        "p0": await store.partition_models(TOPIC, 0),
        "p1": await store.partition_models(TOPIC, 1),
    }


async def test_memory_store_keeps_the_checkpoint_rules() -> None:
    store = MemoryStore(worker_id="w", history_keep=3, seen_keep=4)
    for model in ("m", "n"):
        store.create({"id": model, "kind": "pa", "dim": 2, "params": {}})
    expected = [(outcome, v) for (_, outcome), v in zip(SCRIPT, _versions(), strict=True)]
    assert await _play(store) == expected
    snap = await _snapshot(store)
    assert snap["specs"] == ["m", "n"]
    assert snap["states"]["m"][:3] == (5, Stamp(0, 4, "e4"), Counters(applied=5, ids_sum=5))
    assert snap["states"]["m"][5:] == (Stamp(0, 9, "rb"), "m@4")
    # a, b trimmed (4 kept) when e, f came; e, f unseen by the rollback; then g
    assert snap["seen"]["m"] == layout.of_ids([(3, "c"), (4, "d"), (5, "g")])
    assert snap["seen_upto"] == layout.of_ids([(3, "c"), (4, "d")])
    assert [v for v, e in snap["history"].items() if e is not None] == [3, 4, 5]  # last 3
    assert snap["history"][4][4] == b"stats" and snap["history"][2] is None
    assert (snap["p0"], snap["p1"]) == ({"m"}, {"m", "n"})
    assert store.workers == {"w": {"applied": "1"}} and store.deadletter_count == len(SCRIPT)
    # forget and delete (what restore_partition and the API do)
    await store.forget(TOPIC, 1, ["m"])
    assert await store.partition_models(TOPIC, 1) == {"n"}
    store.delete("n")
    loaded = await store.load(["n"])
    assert (loaded.specs, loaded.states) == ({}, {})
    (res,) = await store.write([_write("n", 1, 1, partition=1)], worker_stats={}, deadletters=0)
    assert (res.outcome, res.version) == (CONFLICT, 0)  # a deleted model's owner loses it


def _versions() -> list[int]:
    return [1, 1, 1, 1, 2, 3, 4, 5, 1]


@pytest.mark.service
@pytest.mark.parametrize("mode", ["standalone", "cluster"])
async def test_memory_store_matches_the_redis_store(
    mode: str, redis_url: str, key_prefix: str, request: pytest.FixtureRequest
) -> None:
    redis: Any = Redis.from_url(redis_url)
    if mode == "cluster":  # the same adapter on a Redis Cluster (scripts as EVAL, per slot)
        redis = RedisCluster.from_url(request.getfixturevalue("redis_cluster").url)
    keys = Keys(f"{key_prefix}ports-{uuid.uuid4().hex[:6]}:")
    retry = StopAwareRetry(
        WorkerStats(), asyncio.Event(), stop_timeout_s=2, max_delay_s=0.1, clock=lambda: 0.0
    )
    real = RedisStore(redis, keys, retry, worker_id="w", history_keep=3, seen_keep=4)
    memory = MemoryStore(worker_id="w", history_keep=3, seen_keep=4)
    try:
        for model in ("m", "n"):
            spec = {"id": model, "kind": "pa", "dim": 2, "params": {}}
            await redis.set(keys.spec(model), json.dumps(spec))
            memory.create(spec)
        assert await _play(real) == await _play(memory)
        assert await _snapshot(real) == await _snapshot(memory)
        worker = {
            k.decode(): v.decode() for k, v in (await redis.hgetall(keys.worker("w"))).items()
        }
        assert worker == memory.workers["w"]
        assert int(await redis.get(keys.deadletter_count())) == memory.deadletter_count
        await real.forget(TOPIC, 1, ["m"])
        await memory.forget(TOPIC, 1, ["m"])
        assert await real.partition_models(TOPIC, 1) == await memory.partition_models(TOPIC, 1)
    finally:
        await real.close()


async def test_the_redis_retry_waits_out_an_outage_and_gives_up_while_stopping() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    failures = 2

    async def flaky() -> int:
        nonlocal failures
        if failures:
            failures -= 1
            raise RedisConnectionError("down")
        return 42

    stats, stopping = WorkerStats(), asyncio.Event()
    retry = StopAwareRetry(stats, stopping, stop_timeout_s=0, max_delay_s=0.1, clock=lambda: 0.0)
    assert await retry.call(flaky, "reading") == 42 and stats.redis_retries == 2
    stopping.set()  # stopping, with no grace left: the first failure ends it
    failures = 5
    with pytest.raises(StoreUnavailable, match="writing: Redis unavailable"):
        await retry.call(flaky, "writing")
    assert stats.redis_retries == 3


# --- the real loop and checkpoint over the in-memory ports --------------------------------


def _settings(**kw: Any) -> Settings:
    values: dict[str, Any] = {
        "events_topic": TOPIC,
        "deadletter_topic": "dead",
        "commit_every": 5,
        "commit_interval_s": 1e9,  # checkpoints by count only: no clock in the test
        "max_poll_records": 7,
        "seen_ids_keep": 100,
        "history_keep": 50,
    }
    values.update(kw)
    return Settings(**values)


def _example(model: str, event_id: str, i: int) -> tuple[bytes, bytes]:
    return wire.encode(wire.example(model, event_id, [1.0, float(i % 5)], float(i % 3), ts=0.0))


def _produce(broker: MemoryBroker, events: list[tuple[bytes, bytes]]) -> None:
    for key, value in events:
        broker.append(TOPIC, value, key, partition=0 if key == b"a" else 1)


async def _run(worker: Worker, log: MemoryLog) -> None:
    """What ``run_worker`` does between its polls, until the log has nothing more; then
    the final checkpoint."""
    while True:
        generation = worker.assignment.generation
        batch = await log.getmany(timeout_ms=0, max_records=worker.settings.max_poll_records)
        stale = generation != worker.assignment.generation
        if not batch and not stale:
            break
        await take(worker, batch, generation)
    async with worker.lock:
        await worker.checkpoint.commit()
        await worker.checkpoint.drain()


async def _start(broker: MemoryBroker, store: MemoryStore, settings: Settings) -> Worker:
    log = MemoryLog(broker)
    worker = Worker(settings, log, store, worker_id="sim", clock=lambda: 0.0)
    await log.start()
    await log.subscribe(TOPIC, worker.rebalance)
    await log.rebalance([P0, P1])
    return worker


async def test_process_batch_and_checkpoint_run_on_the_memory_ports() -> None:
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)
    for model in ("a", "b"):
        store.create({"id": model, "kind": "pa", "dim": 2, "params": {}})
    events = [_example("a", f"a{i}", i) for i in range(23)]
    events += [_example("b", f"b{i}", i) for i in range(11)]
    events += [_example("a", "a3", 3), _example("b", "b0", 0)]  # producer retries: duplicates
    bad = json.dumps({"model": "a", "id": "bad", "x": [], "y": 1}).encode()
    events += [(b"a", bad), _example("ghost", "g1", 1)]  # invalid (a's); unknown model
    _produce(broker, events)
    settings = _settings()
    worker = await _start(broker, store, settings)
    await _run(worker, worker.log)  # type: ignore[arg-type]
    st = worker.stats
    assert (st.applied, st.duplicate, st.rejected) == (34, 2, 2)
    assert st.deadletter == 2 and store.deadletter_count == 2
    reasons = [json.loads(r.value or b"")["reason"] for r in broker.records[DEAD]]
    assert len(reasons) == 2 and "'x'" in reasons[0] and "unknown model 'ghost'" in reasons[1]
    a, b = store.states["a"], store.states["b"]
    assert (a.counters.applied, a.counters.duplicate, a.counters.rejected) == (23, 1, 1)
    assert a.counters.ids_sum == ids_sum(f"a{i}" for i in range(23))
    assert (b.counters.applied, b.counters.duplicate, b.counters.rejected) == (11, 1, 0)
    assert a.stamp is not None and a.stamp.offset == broker.end(P0) - 1  # the invalid one
    assert b.stamp is not None and b.stamp.offset == broker.end(P1) - 2  # the ghost is no b's
    assert broker.committed == {P0: broker.end(P0), P1: broker.end(P1)}
    assert store.workers["sim"]["applied"] == "34"

    # a restart (or a crash after the last checkpoint): a new worker seeks past the stamps
    # and re-learns nothing; new events are learned once
    # (the ghost's record is on no model's stamp: it is handled, dead-lettered, again)
    again = await _start(broker, store, settings)
    assert again.assignment.next_offset == {P0: broker.end(P0), P1: broker.end(P1) - 1}
    _produce(broker, [_example("a", f"a{i}", i) for i in range(20, 30)])  # 20-22: seen ids
    await _run(again, again.log)  # type: ignore[arg-type]
    assert (again.stats.applied, again.stats.duplicate, again.stats.rejected) == (7, 3, 1)
    assert store.states["a"].counters.applied == 30
    assert store.states["a"].counters.ids_sum == ids_sum(f"a{i}" for i in range(30))


async def test_examples_a_model_refuses_are_dead_lettered_with_their_own_records() -> None:
    """A gathered example the learner refuses (a wrong dimension) goes to the dead letters
    as its own record, with the model's reason; the rest of its group is learned."""
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)
    store.create({"id": "a", "kind": "pa", "dim": 2, "params": {}})
    events = [_example("a", f"a{i}", i) for i in range(12)]
    wrong = {3, 4, 10}  # 3 and 4 in one poll, 10 in the next
    for i in wrong:
        events[i] = wire.encode(wire.example("a", f"a{i}", [1.0, 2.0, 3.0], 1.0, ts=0.0))
    _produce(broker, events)
    worker = await _start(broker, store, _settings())
    await _run(worker, worker.log)  # type: ignore[arg-type]
    st = worker.stats
    assert (st.processed, st.applied, st.rejected, st.duplicate) == (12, 9, 3, 0)
    letters = [json.loads(r.value or b"") for r in broker.records[DEAD]]
    assert [json.loads(d["value"])["id"] for d in letters] == ["a3", "a4", "a10"]
    assert [d["offset"] for d in letters] == [3, 4, 10]
    assert all("model 'a' rejected the event" in d["reason"] for d in letters)
    assert store.states["a"].counters.rejected == 3


async def _learn_straight(events: list[tuple[bytes, bytes]], settings: Settings) -> MemoryStore:
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)
    store.create({"id": "a", "kind": "pa", "dim": 2, "params": {}})
    _produce(broker, events)
    worker = await _start(broker, store, settings)
    await _run(worker, worker.log)  # type: ignore[arg-type]
    return store


async def test_a_rollback_over_the_memory_ports_relearns_exactly_once() -> None:
    settings = _settings()
    examples = [_example("a", f"a{i}", i) for i in range(15)]
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)
    store.create({"id": "a", "kind": "pa", "dim": 2, "params": {}})
    _produce(broker, examples[:12])
    worker = await _start(broker, store, settings)
    await _run(worker, worker.log)  # type: ignore[arg-type]
    v1 = await store.history_entry("a", 1)  # the first poll's 7 examples
    assert v1 is not None and v1.counters is not None and v1.counters.applied == 7
    rollback = json.dumps({"model": "a", "id": "rb1", "type": "rollback", "version": 1})
    _produce(broker, [(b"a", rollback.encode()), *examples[12:]])
    await _run(worker, worker.log)  # type: ignore[arg-type]
    after = store.states["a"]
    # back to version 1's stamp (offset 6), then every later example learned again, once
    assert after.counters.applied == 15 and worker.stats.applied == 12 + 5 + 3
    assert after.counters.ids_sum == ids_sum(f"a{i}" for i in range(15))
    assert after.barrier == Stamp(0, 12, "rb1")
    assert worker.stats.rejected == 0 and worker.stats.skipped == 1  # the rollback, re-read
    # the same state as learning the 15 examples straight through
    straight = (await _learn_straight(examples, settings)).states["a"]
    assert (after.state, after.stats) == (straight.state, straight.stats)


@pytest.mark.parametrize("window", [100, 5])
async def test_a_truncated_log_resumes_exactly_or_stops_the_model(window: int) -> None:
    """30 examples learned, checkpoints every 5; the partition loses them and gets the
    first 20 back at their offsets plus 3 new ones (new ids at old offsets). With a window
    that holds every id applied since the newest kept stamp the log still holds (offset
    19), the model resumes there: 33 applied, each once. With a window of 5 it cannot tell
    old from new: it stops learning and says so, and learns nothing twice."""
    settings = _settings(seen_ids_keep=window)
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=window)
    store.create({"id": "a", "kind": "pa", "dim": 2, "params": {}})
    old = [_example("a", f"a{i}", i) for i in range(30)]
    _produce(broker, old)
    first = await _start(broker, store, settings)
    await _run(first, first.log)  # type: ignore[arg-type]
    assert store.states["a"].counters.applied == 30
    broker.reset(P0)
    _produce(broker, old[:20] + [_example("a", f"new{i}", i) for i in range(3)])
    again = await _start(broker, store, settings)
    await _run(again, again.log)  # type: ignore[arg-type]
    state = store.states["a"]
    if window == 100:
        assert "a" not in store.halted and again.stats.voided_stamps == 1
        assert state.counters.applied == 33 and again.stats.applied == 3
        learned = [f"a{i}" for i in range(30)] + [f"new{i}" for i in range(3)]
        assert state.counters.ids_sum == ids_sum(learned)
        assert state.stamp == Stamp(0, 22, "new2")
    else:
        assert store.halted["a"].startswith("model 'a': the log diverged")
        assert state.counters.applied == 30 and again.stats.applied == 0
        assert state.counters.ids_sum == ids_sum(f"a{i}" for i in range(30))


@pytest.mark.parametrize("fresh", [3, 15])
async def test_a_running_worker_finds_its_log_cut_under_it(fresh: int) -> None:
    """As above, but the same worker keeps running across the cut. With 3 new records the
    log ends below its position: the client starts over from the beginning, the worker sees
    records below the next offset and the newest record it handled gone. With 15 the log
    already reaches past its position: only the checkpoint's witness (the last record of the
    last checkpoint, now another event) shows it. Either way the partition's models go
    back to their checkpoints and resume where the log diverged: every id once."""
    settings = _settings()
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)
    store.create({"id": "a", "kind": "pa", "dim": 2, "params": {}})
    old = [_example("a", f"a{i}", i) for i in range(30)]
    _produce(broker, old)
    worker = await _start(broker, store, settings)
    await _run(worker, worker.log)  # type: ignore[arg-type]
    broker.reset(P0)
    _produce(broker, old[:20] + [_example("a", f"new{i}", i) for i in range(fresh)])
    await _run(worker, worker.log)  # type: ignore[arg-type]
    state = store.states["a"]
    assert worker.stats.log_resets == 1 and "a" not in store.halted
    assert state.counters.applied == 30 + fresh
    learned = [f"a{i}" for i in range(30)] + [f"new{i}" for i in range(fresh)]
    assert state.counters.ids_sum == ids_sum(learned)
    assert state.stamp == Stamp(0, 19 + fresh, f"new{fresh - 1}")


async def test_an_idle_model_is_reloaded_when_the_store_lost_its_writes() -> None:
    """The store loses the last checkpoint of a model that gets no event after (a Redis
    restart with AOF everysec): the worker notices the store's new epoch, finds the stored
    version is not the one it wrote, reloads it and learns the lost events again (before:
    the stored state lacked them until the model's next event)."""
    now = [0.0]
    settings = _settings(commit_interval_s=10.0, commit_every=1000)
    broker = MemoryBroker({TOPIC: 2})
    store = MemoryStore(worker_id="sim", history_keep=50, seen_keep=100)
    store.create({"id": "a", "kind": "pa", "dim": 2, "params": {}})
    log = MemoryLog(broker)
    worker = Worker(settings, log, store, worker_id="sim", clock=lambda: now[0])
    await log.start()
    await log.subscribe(TOPIC, worker.rebalance)
    await log.rebalance([P0, P1])
    _produce(broker, [_example("a", f"a{i}", i) for i in range(5)])
    await _run(worker, log)
    kept = (store.states["a"], store.seen["a"], list(store.histories["a"]))
    _produce(broker, [_example("a", f"a{i}", i) for i in range(5, 9)])
    await _run(worker, log)
    assert store.states["a"].counters.applied == 9
    # the last write is lost, as a restarted Redis loses it
    store.states["a"], store.seen["a"], store.histories["a"] = kept
    store.run += 1
    now[0] += settings.commit_interval_s
    await take(worker, {}, worker.assignment.generation)  # an empty poll: the store check
    await _run(worker, log)
    state = store.states["a"]
    assert state.counters.applied == 9 and worker.stats.conflicts == 1
    assert state.counters.ids_sum == ids_sum(f"a{i}" for i in range(9))
    assert state.stamp == Stamp(0, 8, "a8")
