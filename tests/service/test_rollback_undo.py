"""A rollback that undoes (issue 32; docs/checkpoints.md, "Undoing events"), end to end
against the real broker and Redis.

Before, a rollback always re-learned the log from the version's stamp, the bad rows
included, so it could not undo them. ``discard_after`` installs version N and never learns
the events between N's stamp and the rollback (counted in ``status.discarded``, listed
under the checkpoints); ``skip_ids`` re-learns all but the named ids. Each is decided once,
in log order: a worker killed before or after checkpointing it ends where one that never
died does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

import learners
from learners.codec import decode_state, encode_state
from service.api import create_app
from service.store.checkpoints import HistoryEntry, ids_sum
from tests.service.conftest import WorkerProcess, produce, read_topic, replay, run, wait_for
from tests.service.test_rollback import (
    SPECS,
    WAIT_S,
    _busiest_model,
    _create_specs,
    _events,
    _examples,
    _history,
    _rollbacks_logged,
    _settings,
    _states,
)

pytestmark = pytest.mark.service

Log = list[tuple[int, int, Any, bytes]]


def _at_last(st: Any, events: list[dict[str, Any]]) -> bool:
    """Every model's stamp is on its last example (the counters are checked after)."""
    last = {e["model"]: e["id"] for e in events if "type" not in e}
    states = run(_states(st))
    return all((s := states[m]) is not None and s.stamp.event_id == last[m] for m in last)


def _expected(
    log: Log, model: str, entry: HistoryEntry, rollback_at: int, discard: bool, skip: list[str]
) -> tuple[learners.Learner, list[str], int, int]:
    """``model`` after its rollback to ``entry`` at offset ``rollback_at``, written apart
    from the worker: N's state, its ids plus (with ``discard``) the ids learned between
    N's stamp and the rollback plus ``skip`` as seen, then the examples after the stamp
    (with ``discard``: after the rollback). Returns the learner, the applied ids after the
    rollback decision, the duplicates counted after it and the applied count undone."""
    ex = _examples(log)
    p, off = entry.stamp.partition, entry.stamp.offset
    mine = [(o, json.loads(v)) for q, o, _, v in ex if q == p and json.loads(v)["model"] == model]
    through = replay({model: SPECS[model]}, [r for r in ex if r[0] != p or r[1] < rollback_at])
    before = replay({model: SPECS[model]}, [r for r in ex if r[0] != p or r[1] <= off])[model]
    assert entry.counters is not None and entry.counters.applied == len(before.applied_ids)
    seen = set(before.applied_ids) | set(skip)
    undone = through[model].applied_ids[len(before.applied_ids) :]
    if discard:
        seen |= set(undone)
    learner = learners.load_state(decode_state(entry.state))
    applied: list[str] = []
    dup = 0
    for o, ev in mine:
        if o <= off or (discard and o < rollback_at):
            continue
        if ev["id"] in seen:
            dup += 1
            continue
        seen.add(ev["id"])
        applied.append(ev["id"])
        learner.learn(ev["x"], ev["y"], hint=ev.get("hint"))
    return learner, applied, dup, len(undone) if discard else 0


def _check_model(
    st: Any, log: Log, model: str, entry: HistoryEntry, discard: bool, skip: list[str]
) -> int:
    rollback_at = [o for _, o, _, v in log if json.loads(v).get("type") == "rollback"]
    assert len(rollback_at) == 1
    learner, applied, dup, undone = _expected(log, model, entry, rollback_at[0], discard, skip)
    s = run(_states(st))[model]
    assert entry.counters is not None and s is not None
    assert s.state == encode_state(learner.state()), "the state is not N's plus what follows"
    before_ids = replay(
        {model: SPECS[model]},
        [r for r in _examples(log) if r[0] != entry.stamp.partition or r[1] <= entry.stamp.offset],
    )[model].applied_ids
    assert s.counters.applied == entry.counters.applied + len(applied)
    assert s.counters.ids_sum == ids_sum(before_ids + applied)
    assert s.counters.duplicate == entry.counters.duplicate + dup
    # the other models: one pass over the log, untouched by the rollback
    ref = replay(SPECS, _examples(log))
    states = run(_states(st))
    for m in SPECS:
        if m != model:
            other = states[m]
            assert other is not None and other.state == encode_state(ref[m].learner.state()), m
            assert other.counters.applied == len(ref[m].applied_ids), m
    return undone


def test_discard_after_never_learns_the_events_after_the_version(make_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = _settings(make_settings)
    w = WorkerProcess(st, "rb-discard", tmp_path)
    with w.running(), TestClient(create_app(st)) as api:
        for spec in SPECS.values():
            assert api.post("/v1/models", json=spec).status_code == 201
        phase1 = _events(1200, seed=41, prefix="a", dup_every=25)
        run(produce(st, phase1))
        wait_for(lambda: _at_last(st, phase1), WAIT_S, "phase 1 learned")
        model = _busiest_model(run(read_topic(st, st.events_topic)))
        history = run(_history(st, model))
        entry = history[len(history) // 2]
        url = f"/v1/models/{model}/rollback"
        for bad in ({"version": 1, "discard_after": "yes"}, {"version": 1, "skip_ids": [""]}):
            assert api.post(url, json=bad).status_code == 422, bad
        res = api.post(url, json={"version": entry.version, "discard_after": True})
        assert res.status_code == 202, res.text
        assert res.json()["discard_after"] is True
        # after it: new events, and a re-send of an event it discarded (a duplicate)
        resent = next(e for e in reversed(phase1) if e["model"] == model and "type" not in e)
        phase2 = [*_events(400, seed=42, prefix="b"), dict(resent)]
        run(produce(st, phase2))
        wait_for(lambda: _at_last(st, phase1 + phase2), WAIT_S, "phase 2 learned")
        listed = api.get(f"/v1/models/{model}/checkpoints").json()
        status = api.get(f"/v1/models/{model}").json()["status"]
    log = run(read_topic(st, st.events_topic))
    undone = _check_model(st, log, model, entry, discard=True, skip=[])
    assert undone > 0
    (rb,) = listed["rollbacks"]
    assert rb["event_id"] == res.json()["event_id"] and rb["discard_after"] is True
    assert rb["discarded"] == undone == status["discarded"]
    assert rb["discarded_from"] == entry.stamp.offset + 1 and rb["discarded_to"] == rb["offset"] - 1
    assert run(read_topic(st, st.deadletter_topic)) == []


def test_skip_ids_relearns_all_but_the_named_events(make_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    st = _settings(make_settings)
    w = WorkerProcess(st, "rb-skip", tmp_path)
    with w.running(), TestClient(create_app(st)) as api:
        for spec in SPECS.values():
            assert api.post("/v1/models", json=spec).status_code == 201
        phase1 = _events(1200, seed=51, prefix="a")
        run(produce(st, phase1))
        wait_for(lambda: _at_last(st, phase1), WAIT_S, "phase 1 learned")
        log = run(read_topic(st, st.events_topic))
        model = _busiest_model(log)
        history = run(_history(st, model))
        entry = history[len(history) // 2]
        after = [
            json.loads(v)["id"]
            for p, o, _, v in log
            if p == entry.stamp.partition
            and o > entry.stamp.offset
            and json.loads(v)["model"] == model
        ]
        skip = [after[0], after[len(after) // 2]]
        res = api.post(
            f"/v1/models/{model}/rollback", json={"version": entry.version, "skip_ids": skip}
        )
        assert res.status_code == 202, res.text
        phase2 = _events(300, seed=52, prefix="b")
        run(produce(st, phase2))
        wait_for(lambda: _at_last(st, phase1 + phase2), WAIT_S, "re-learned")
        listed = api.get(f"/v1/models/{model}/checkpoints").json()["rollbacks"]
        status = api.get(f"/v1/models/{model}").json()["status"]
    log = run(read_topic(st, st.events_topic))
    _check_model(st, log, model, entry, discard=False, skip=skip)
    assert [r["skip_ids"] for r in listed] == [skip] and status["discarded"] == 0


@pytest.mark.slow  # three worker starts, two SIGKILLs
@pytest.mark.parametrize("options", [{"discard_after": True}, {"skip_ids": ["a7", "a8"]}])
def test_an_undoing_rollback_is_decided_once_across_crashes(
    make_settings, tmp_path, options: dict[str, Any]
) -> None:  # type: ignore[no-untyped-def]
    st = _settings(make_settings)
    run(_create_specs(st))
    w = WorkerProcess(st, "rb-undo-crash", tmp_path)
    phase1 = _events(1200, seed=61, prefix="a", dup_every=20)
    run(produce(st, phase1))
    with w.running():
        wait_for(lambda: _at_last(st, phase1), WAIT_S, "phase 1 learned")
        assert w.stop() == 0  # every model checkpointed on its last event
    model = _busiest_model(run(read_topic(st, st.events_topic)))
    entry = run(_history(st, model))[-2]  # an old version: many events after its stamp
    skip = [i for i in options.get("skip_ids", []) if any(e["id"] == i for e in phase1)]
    rollback = {"model": model, "id": "rollback-u", "type": "rollback",
                "version": entry.version, **options}  # fmt: skip
    phase2 = _events(300, seed=62, prefix="b")
    run(produce(st, [rollback, *phase2]))
    # 1: dies at its first checkpoint, before writing: the rollback decided in memory only;
    # 2: dies right after writing its first checkpoint (the rollback in it); 3: runs on
    for fault in ("before_checkpoint=1", "after_state_write=1"):
        w.start(
            ONLINEPREDICT_FAULTS=fault,
            ONLINEPREDICT_COMMIT_EVERY="60",
            ONLINEPREDICT_COMMIT_INTERVAL_S="600",
        )
        wait_for(lambda: not w.alive(), WAIT_S, f"the worker killed by {fault}")
    with w.running():
        wait_for(lambda: _at_last(st, phase1 + phase2), WAIT_S, "learned after the restarts")
        assert w.stop() == 0
    s = run(_states(st))[model]
    assert s is not None and s.barrier is not None and s.barrier.event_id == "rollback-u"
    assert _rollbacks_logged(w) == 2  # by incarnations 1 and 2; 3 skipped it
    log = run(read_topic(st, st.events_topic))
    _check_model(st, log, model, entry, bool(options.get("discard_after")), skip)
    assert run(read_topic(st, st.deadletter_topic)) == []


def test_rollback_options_decode_or_make_the_event_invalid() -> None:
    """``discard_after``, ``skip_ids`` and ``stamp`` as the worker reads them (docs/events.md
    §4); a bad one makes the whole event invalid (dead-lettered), never half-applied."""
    from clients import wire
    from service.worker.events import decode_event
    from service.worker.invalid import InvalidEvent

    def decode(event: dict[str, Any]) -> Any:
        return decode_event(b"m", json.dumps(event).encode())

    ev = decode(wire.rollback("m", "r1", 3, discard_after=True, skip_ids=["a", "b"],
                              stamp=(1, 41, "e41")))  # fmt: skip
    assert (ev.version, ev.discard_after, ev.skip_ids, ev.stamp) == (3, True, ("a", "b"),
                                                                    (1, 41, "e41"))  # fmt: skip
    plain = decode(wire.rollback("m", "r2", 3))
    assert (plain.discard_after, plain.skip_ids, plain.stamp) == (False, (), None)
    base = {"model": "m", "id": "r3", "type": "rollback", "version": 3}
    for bad in (
        {"discard_after": "yes"},
        {"discard_after": 1},
        {"skip_ids": "a"},
        {"skip_ids": [""]},
        {"skip_ids": [7]},
        {"skip_ids": ["x"] * (wire.MAX_SKIP_IDS + 1)},
        {"stamp": {"partition": 0, "offset": "1", "event_id": "e"}},
        {"stamp": [0, 1, "e"]},
    ):
        with pytest.raises(InvalidEvent):
            decode({**base, **bad})
