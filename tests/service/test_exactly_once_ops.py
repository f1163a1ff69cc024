"""Ordinary operations that break "no event is lost or learned twice" (issue 14).

Each test runs a real worker process against a real broker and Redis, does one operation an
operator or the infrastructure does (re-create a model, add partitions, lose the log's tail,
lose Redis's last second) and checks the model against docs/reliability.md "Delivery
guarantees": its checkpoint has ``applied`` == the number of distinct valid event ids the log
delivered to that model incarnation, ``ids_sum`` == the reference sum over exactly those ids,
and the state bytes equal a clean in-process replay of them (``tests.service.conftest.replay``).

Each failed before its fix, with the numbers in its docstring.

Where a test waits, it waits on the worker group's committed Kafka offset reaching the end
of the records it produced: a worker commits only after the checkpoint that covers them is
in Redis, and it handles a partition in offset order, so whatever replay the worker chose has
run by then. Dedupe by id is bounded (``seen_ids_keep``, 10,000 by default), so a model whose
partition holds more events than that relies on its stamp alone; the tests that replay a
partition give the window 50 ids to get there with a few hundred events.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis as redis_lib
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from service.embedded import free_port, start_broker
from service.embedded.topics import ensure_topics
from service.store.keys import Keys
from tests.service._ops_support import (
    assert_exact,
    ends_of,
    examples,
    mismatches,
    produce_at,
    recreate_topic,
    register,
    wait_committed,
    worker_metric,
    worker_records,
)
from tests.service.conftest import FAST, WorkerProcess, read_topic, replay, run

pytestmark = [pytest.mark.service, pytest.mark.slow]

SMALL_WINDOW = 50  # seen_ids_keep: fewer ids than a partition's replay (see the docstring)


def _spec(model: str) -> dict:
    return {"id": model, "kind": "pa", "dim": 3, "params": {"C": 0.5}}


def _registered(redis_client: redis_lib.Redis, st: Settings, model: str) -> tuple[Keys, dict]:
    """Register the model ``model`` (`_spec`) under ``st``'s key prefix: its keys, its spec."""
    keys, spec = Keys(st.key_prefix), _spec(model)
    register(redis_client, keys, spec)
    return keys, spec


def test_recreated_model_learns_only_events_after_its_creation(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """DELETE /v1/models/{id} then POST /v1/models with the same id: the new incarnation
    learns the events produced after its creation, and nothing of the deleted model's
    (before incarnations: 110 applied for 10, and the id left in partition-models)."""
    st = make_settings(**FAST)
    keys, model = Keys(st.key_prefix), "reborn"
    spec = _spec(model)
    worker = WorkerProcess(st, "w", tmp_path)
    with TestClient(create_app(st)) as api:
        assert api.post("/v1/models", json=spec).status_code == 201
        worker.start()
        try:
            old = run(produce_at(st, examples(model, 3, 100, seed=141, tag="old")))
            wait_committed(st, ends_of(old), "the first incarnation's events")
            partition = old[0][0]
            assert api.delete(f"/v1/models/{model}").status_code == 204
            members = keys.partition_models(st.events_topic, partition)
            listed_after_delete = redis_client.sismember(members, model)
            assert api.post("/v1/models", json=spec).status_code == 201
            new = run(produce_at(st, examples(model, 3, 10, seed=142, tag="new")))
            wait_committed(st, ends_of(old, new), "the new incarnation's events")
            assert worker.stop() == 0
        finally:
            worker.kill()
    problems = mismatches(redis_client, keys, model, replay({model: spec}, new)[model])
    if listed_after_delete:
        problems.append(f"the deleted model is still in partition-models:{partition}")
    assert_exact(problems)


def test_model_events_on_another_partition_are_forwarded_and_learned_once(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """Partitions added to the events topic move a key to another partition: a model's later
    events land elsewhere than its earlier ones (emulated by producing to an explicit
    partition). A worker restart in between runs the assignment path for both. A model
    lives on its home partition for life: the events elsewhere are forwarded to it with
    their ids (docs/reliability.md, "Any producer, any partition") and learned once, in the
    home partition's order; the home partition is not replayed (before the home partition:
    425 applied for 225; before forwarding: the 20 moved events were dead-lettered)."""
    st = make_settings(**FAST, seen_ids_keep=SMALL_WINDOW)
    model = "moved"
    keys, spec = _registered(redis_client, st, model)
    with WorkerProcess(st, "w", tmp_path).running() as worker:
        before = run(produce_at(st, examples(model, 3, 200, seed=143, tag="before")))
        home = before[0][0]
        wait_committed(st, ends_of(before), "the events on the model's first partition")
        other = (home + 1) % st.partitions
        after = run(produce_at(st, examples(model, 3, 20, seed=144, tag="after"), other))
        wait_committed(st, ends_of(before, after), "the events on the added partition")
        assert worker.stop() == 0
        worker.start()  # the next assignment of both partitions
        # a few more on the first partition: once they are committed, whatever replay of it
        # the restarted worker chose has run
        tail = run(produce_at(st, examples(model, 3, 5, seed=145, tag="tail"), home))
        wait_committed(st, ends_of(before, after, tail), "the events after the restart")
        assert worker.stop() == 0
    log = run(read_topic(st, st.events_topic))
    home_log = sorted(r for r in log if r[0] == home)  # the order the model learns in
    moved = {json.loads(v)["id"] for _, _, _, v in after}
    forwarded = {json.loads(v)["id"] for _, _, _, v in home_log} & moved
    ref = replay({model: spec}, home_log)
    problems = mismatches(redis_client, keys, model, ref[model])
    if forwarded != moved:
        problems.append(f"{len(moved - forwarded)} of the {len(moved)} moved events not forwarded")
    if len(ref[model].applied_ids) != 225:
        problems.append(f"the home log holds {len(ref[model].applied_ids)} distinct ids, not 225")
    letters = [json.loads(v) for _, _, _, v in run(read_topic(st, st.deadletter_topic))]
    lettered = {json.loads(d["value"])["id"] for d in letters} & moved
    if lettered:
        problems.append(f"{len(lettered)} moved events dead-lettered")
    assert_exact(problems)


def _truncate_and_restart(
    st, model: str, redis_client: redis_lib.Redis, tmp_path: Path, port: int, broker
):  # type: ignore[no-untyped-def]
    """Learn 300 events, stop the worker, restart the memory broker (the log is gone),
    re-produce the first 200 (same ids at the same offsets) and 5 new ones, restart the
    worker; returns the old records, the new log and the broker now running."""
    with WorkerProcess(st, "w", tmp_path).running() as worker:
        old = run(produce_at(st, examples(model, 3, 300, seed=146, tag="old")))
        wait_committed(st, ends_of(old), "the events before the truncation")
        assert worker.stop() == 0
        broker.stop()
        broker = start_broker(port=port)  # memory storage: the log is gone
        run(ensure_topics(st))
        survivors = [json.loads(v) for _, _, _, v in old[:200]]
        fresh = examples(model, 3, 5, seed=147, tag="fresh")
        relog = run(produce_at(st, survivors + fresh))
        assert [o for _, o, _, _ in relog] == list(range(205))  # new ids at old offsets
        worker.start()
        wait_committed(st, ends_of(relog), "the rewritten log")
        assert worker.stop() == 0
    return old, relog, broker


def test_truncated_log_prefix_is_not_learned_again_after_a_restart(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """The log loses its tail (replication factor 1, unclean leader election) and new
    records are written at the old offsets; the worker restarts in between. The model
    resumes after the newest kept stamp the log still holds (service/worker/divergence.py):
    the surviving prefix is not learned again, the new records are learned once."""
    port = free_port()
    broker = start_broker(port=port)
    try:
        st = make_settings(**FAST, kafka_bootstrap=broker.url)
        model = "cut"
        keys, spec = _registered(redis_client, st, model)
        old, relog, broker = _truncate_and_restart(st, model, redis_client, tmp_path, port, broker)
    finally:
        broker.stop()
    ref = replay({model: spec}, old + relog)
    problems = mismatches(redis_client, keys, model, ref[model])
    if redis_client.hget(keys.state(model), "halted"):
        problems.append("halted although its window holds every id it applied")
    assert_exact(problems)


def test_truncated_log_beyond_the_window_stops_the_model_instead_of_relearning(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """As above with a dedupe window of 50 ids: the newest kept stamp still in the log is
    older than the window reaches, so old and new events cannot be told apart there. The
    model stops learning and says so; it never learns an event twice (before: the
    partition was relearned from its start, the surviving prefix twice: 505 applied for
    305 distinct ids)."""
    port = free_port()
    broker = start_broker(port=port)
    try:
        st = make_settings(**FAST, seen_ids_keep=SMALL_WINDOW, kafka_bootstrap=broker.url)
        model = "cut-far"
        keys, spec = _registered(redis_client, st, model)
        old, _, broker = _truncate_and_restart(st, model, redis_client, tmp_path, port, broker)
        with TestClient(create_app(st)) as api:
            status = api.get(f"/v1/models/{model}").json()["status"]
            metrics = api.get("/metrics").text
    finally:
        broker.stop()
    ref = replay({model: spec}, old)  # what it learned before, and nothing since
    problems = mismatches(redis_client, keys, model, ref[model])
    if not (status["halted"] or "").startswith(f"model {model!r}: the log diverged"):
        problems.append(f"status does not say it stopped: {status}")
    if f'onlinepredict_model_halted{{model="{model}"}} 1.0' not in metrics:
        problems.append("the halted gauge is not 1")
    assert_exact(problems)


def test_truncated_log_new_records_are_learned_by_a_running_worker(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """As above, but the worker keeps running, in its consumer group, across the
    truncation: the new records at offsets it has passed are learned, not dropped.

    Restarting tansu would also lose the group, and the worker's rejoin would run the
    assignment path of the test above; so the log is truncated by deleting and re-creating
    the topic on the running broker (the client sees what an unclean leader election shows
    it: its position is past the log's end, and new records sit at offsets it has passed).
    The worker probes the last record of its last checkpoint before the next one, finds it
    gone and resumes after the model's origin (the default dedupe window holds every id it
    learned), so the 200 survivors are dropped as duplicates and the 105 new records are
    learned (before: 305 applied for 405 distinct ids, the new records at 200-299 never
    read).
    """
    metrics_port = free_port()  # its record counters, for the failure message
    st = make_settings(**FAST, worker_metrics_port=metrics_port)
    model = "cut-live"
    keys, spec = _registered(redis_client, st, model)
    with WorkerProcess(st, "w", tmp_path).running() as worker:
        old = run(produce_at(st, examples(model, 3, 300, seed=148, tag="old")))
        wait_committed(st, ends_of(old), "the events before the truncation")
        run(recreate_topic(st))
        survivors = [json.loads(v) for _, _, _, v in old[:200]]
        # new ids at old offsets 200-299, and on past the worker's position (300), so that
        # it has records to handle whatever it makes of the ones below
        fresh = examples(model, 3, 105, seed=149, tag="fresh")
        relog = run(produce_at(st, survivors + fresh))
        assert [o for _, o, _, _ in relog] == list(range(305))
        wait_committed(st, ends_of(relog), "the rewritten log")
        counts = worker_records(metrics_port)
        assert worker.stop() == 0  # its final checkpoint holds whatever it learned
    joins = worker.log_text().count("Setting newly assigned partitions")
    assert joins == 1, f"the worker rejoined its group {joins - 1} times: not this case"
    ref = replay({model: spec}, old + relog)
    problems = mismatches(redis_client, keys, model, ref[model])
    assert_exact([*problems, f"worker record outcomes: {counts}"] if problems else [])


def test_a_restart_under_a_hundred_void_stamps_settles_in_one_assignment(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """The memory broker restarts empty under 100 models with stamps (issue 17's restart
    storm: each void stamp's probe waited out a 2 s fetch inside the rebalance, one model
    after another, past the session timeout: 116 warnings, generation 11, 3.5 minutes).
    The probe now sees the end from the high watermark of a short fetch, and a partition's
    stamps are judged lowest first, the first one past the end voiding the rest: the worker
    joins its group once and every model learns its new event, once."""
    port = free_port()
    broker = start_broker(port=port)
    models = [f"storm-{i}" for i in range(100)]
    try:
        st = make_settings(**FAST, kafka_bootstrap=broker.url)
        keys = Keys(st.key_prefix)
        for model in models:
            register(redis_client, keys, _spec(model))
        with WorkerProcess(st, "w", tmp_path).running() as worker:
            before = [e for m in models for e in examples(m, 3, 2, seed=152, tag="before")]
            wait_committed(st, ends_of(run(produce_at(st, before))), "the first events")
            assert worker.stop() == 0
            broker.stop()
            broker = start_broker(port=port)  # memory storage: every stamp is now void
            run(ensure_topics(st))
            worker.start()
            started = time.monotonic()
            after = [e for m in models for e in examples(m, 3, 1, seed=153, tag="after")]
            wait_committed(st, ends_of(run(produce_at(st, after))), "the events after")
            settled = time.monotonic() - started
            assert worker.stop() == 0
    finally:
        broker.stop()
    restarted = worker.logs[-1].read_text(errors="replace")
    joins = restarted.count("Setting newly assigned partitions")
    print(f"restart with {len(models)} void stamps: learning again after {settled:.1f} s")
    assert joins == 1, f"the restarted worker joined its group {joins} times"
    applied = [int(redis_client.hget(keys.state(m), "applied") or 0) for m in models]
    assert applied == [3] * len(models)


def test_lost_first_checkpoint_is_relearned_not_skipped(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """Redis loses a partition's first checkpoint (AOF everysec, an async replica's
    failover) after Kafka committed the offset: the model relearns those events from the
    log instead of starting at the committed offset without them (before: 5 applied for
    105)."""
    st = make_settings(**FAST)
    model = "amnesia"
    keys, spec = _registered(redis_client, st, model)
    with WorkerProcess(st, "w", tmp_path).running() as worker:
        first = run(produce_at(st, examples(model, 3, 100, seed=150, tag="first")))
        wait_committed(st, ends_of(first), "the first checkpoint and its offset commit")
        assert worker.stop() == 0
        # Redis as the lost write leaves it: the spec (written long before) is there, the
        # checkpoint and everything written with it is not
        partition = first[0][0]
        redis_client.delete(keys.state(model), keys.history(model), keys.seen(model))
        redis_client.srem(keys.partition_models(st.events_topic, partition), model)
        worker.start()
        more = run(produce_at(st, examples(model, 3, 5, seed=151, tag="more")))
        wait_committed(st, ends_of(first, more), "the events after the restart")
        assert worker.stop() == 0
    ref = replay({model: spec}, first + more)
    problems = mismatches(redis_client, keys, model, ref[model])
    assert_exact(problems)


def test_an_id_resent_past_the_dedupe_window_is_counted_not_silent(
    make_settings, redis_client: redis_lib.Redis, tmp_path: Path
) -> None:
    """The dedupe horizon is stated (ids in the window, and how long ago its oldest was
    applied) and the ids that left it are counted, per model, on the worker's /metrics: an
    id re-sent past the window is learned again, but never silently (before: nothing said
    so; docs/reliability.md, "Duplicates")."""
    port = free_port()
    st = make_settings(**FAST, seen_ids_keep=5, worker_metrics_port=port)
    model = "window"
    keys, _ = _registered(redis_client, st, model)
    with WorkerProcess(st, "w", tmp_path).running() as worker:
        first = examples(model, 3, 10, seed=150, tag="w")
        sent = run(produce_at(st, first))
        wait_committed(st, ends_of(sent), "ten events")
        inside = run(produce_at(st, first[7:8]))  # still in the window: dropped
        again = run(produce_at(st, first[:1]))  # 9 ids later: past the window, learned
        wait_committed(st, ends_of(sent, inside, again), "the re-sent ids")
        window = worker_metric(port, "onlinepredict_dedupe_horizon_events{")
        seconds = worker_metric(port, "onlinepredict_dedupe_horizon_seconds{")
        evicted = worker_metric(port, "onlinepredict_dedupe_evicted_total{")
        assert worker.stop() == 0
    h = redis_client.hgetall(keys.state(model))
    problems = []
    if (int(h[b"applied"]), int(h[b"duplicate"])) != (11, 1):
        problems.append(f"applied/duplicate {h[b'applied']}/{h[b'duplicate']}, expected 11/1")
    if window.get(model) != 5.0 or not seconds.get(model, -1) >= 0:
        problems.append(f"horizon not stated: {window}, {seconds}")
    if evicted.get(model) != 6.0:  # 11 applied through a window of 5
        problems.append(f"ids that left the window: {evicted}, expected 6")
    assert_exact(problems)
