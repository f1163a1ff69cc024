"""``frame_apply.apply_frame`` against the loop of ``handle`` over the same rows as JSON
events (docs/reliability.md, "Frames"): the same outcomes, counters, seen window, learner
state and statistics, bit for bit, whatever the dedupe window, duplicates and bad rows;
the stamp moves once per frame."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from clients import wire
from learners.codec import encode_state
from service.store.checkpoints import Stamp
from service.worker.events import Event
from service.worker.frame_apply import apply_frame
from service.worker.frames import decode_frame
from service.worker.runtime import APPLIED, DUPLICATE, REJECTED, ModelRuntime

SPECS = {
    "pa": {"id": "m", "kind": "pa", "dim": 3, "params": {"C": 0.5}},
    "cls": {"id": "m", "kind": "pa-classifier", "dim": 3, "params": {}},
    "dvaw": {"id": "m", "kind": "dvaw", "dim": 3, "params": {}},
}


def _frames(kind: str, seed: int) -> list[tuple[list[str], np.ndarray, list[Any], list[Any]]]:
    rng = random.Random(seed)
    used: list[str] = []
    out = []
    for f in range(25):
        n = rng.randint(1, 12)
        ids = []
        for i in range(n):
            r = rng.random()
            if used and r < 0.15:
                ids.append(rng.choice(used[-20:]))  # re-sent id
            elif ids and r < 0.25:
                ids.append(rng.choice(ids))  # twice in the frame
            else:
                ids.append(f"{seed}-{f}-{i}")
        used += ids
        d = 4 if rng.random() < 0.05 else 3  # now and then a frame of the wrong dimension
        X = np.array([[rng.gauss(0, 1) for _ in range(d)] for _ in range(n)])
        if rng.random() < 0.2:
            X[rng.randrange(n), 0] = rng.choice([np.nan, 1e200])  # a bad row
        if kind == "cls":
            y: list[Any] = [rng.choice([-1.0, 1.0]) for _ in range(n)]
            if rng.random() < 0.1:
                y[0] = 0.5  # the classifier refuses it
        else:
            y = [rng.gauss(0, 1) if rng.random() > 0.05 else None for _ in range(n)]
        hints = [rng.uniform(0, 1) if rng.random() < 0.3 else None for _ in range(n)]
        out.append((ids, X, y, hints))
    return out


def _fresh(kind: str, keep: int) -> ModelRuntime:
    return ModelRuntime.create(SPECS[kind], None, [], seen_keep=keep)


@pytest.mark.parametrize("keep", [0, 3, 8, 10_000])
@pytest.mark.parametrize("kind", sorted(SPECS))
def test_a_frame_is_its_rows_as_json_events(kind: str, keep: int) -> None:
    framed, ref = _fresh(kind, keep), _fresh(kind, keep)
    offset = 0
    for f, (ids, X, y, hints) in enumerate(_frames(kind, seed=keep + len(kind))):
        frame = decode_frame(b"m", wire.encode_frame("m", ids, X, y, hints, ts=0.0))
        out = apply_frame(framed, frame, 0, 1000 + f)
        want: dict[str, int] = {APPLIED: 0, DUPLICATE: 0, REJECTED: 0}
        for i, event_id in enumerate(ids):
            offset += 1
            if i in frame.bad:  # the JSON decoder refuses it: the loop counts it so
                ref.counters.rejected += 1
                want[REJECTED] += 1
                continue
            ev = Event("m", event_id, X[i].tolist(), y[i], hint=hints[i])
            want[ref.handle(ev, 0, offset)] += 1
        assert (out.applied, out.duplicate, len(out.rejected)) == (
            want[APPLIED],
            want[DUPLICATE],
            want[REJECTED],
        )
        assert [i for i, _ in out.rejected] == sorted(i for i, _ in out.rejected)
        assert framed.stamp == Stamp(0, 1000 + f, ids[-1])
        assert vars(framed.counters) == vars(ref.counters)
        assert framed.seen.records() == ref.seen.records()  # the window: digests, order
        assert framed.seen.pending() == ref.seen.pending()  # what the next write appends
    assert encode_state(framed.learner.state()) == encode_state(ref.learner.state())
    assert encode_state(framed.stats.state()) == encode_state(ref.stats.state())


def test_a_covered_frame_is_skipped_whole_and_a_foreign_one_changes_nothing() -> None:
    rt = _fresh("pa", 100)
    value = wire.encode_frame("m", ["a", "b"], np.ones((2, 3)), [1.0, 2.0], ts=0.0)
    frame = decode_frame(b"m", value)
    assert apply_frame(rt, frame, 0, 5).applied == 2
    state = encode_state(rt.learner.state())
    again = apply_frame(rt, frame, 0, 5)  # a replay below the stamp
    assert (again.skipped, again.applied) == (2, 0)
    foreign = apply_frame(rt, decode_frame(b"m", value), 1, 9)
    assert not foreign.counted and len(foreign.rejected) == 2
    assert "partition" in foreign.rejected[0][1]
    assert encode_state(rt.learner.state()) == state and rt.counters.applied == 2
