"""The per-event fault boundary (docs/reliability.md): for every registered kind, a stream
poisoned with events that fail in the model (a wrong dimension, a learner that raises
half-way through its update, with five kinds of exception) leaves the model
bit-identical to the same stream with the rejected events removed; the batched and the
per-event paths alike; every poison event is rejected with a reason, every clean one
learned."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import learners
from clients import wire
from learners.codec import encode_state
from service.store.checkpoints import ids_sum
from service.worker.events import Event
from service.worker.frame_apply import apply_frame
from service.worker.frames import decode_frame
from service.worker.runtime import APPLIED, REJECTED, ModelRuntime

DIM = 3
N, SEED = 60, 1  # the clean stream (transductive kinds register its vectors first)
BUG = 12345.0  # x[0] that makes the patched learner fail in the middle of its update
FAILURES = [RuntimeError, OverflowError, FloatingPointError, np.linalg.LinAlgError, MemoryError]


def _spec(kind: str) -> dict[str, Any]:
    params = learners.REGISTRY[kind]._test_params()[0]
    return {"id": "m", "kind": kind, "dim": DIM, "params": params}


def _clean_stream(kind: str, n: int, seed: int) -> list[Event]:
    cls = learners.REGISTRY[kind]
    X, y = cls._test_stream(DIM, n, seed)
    return [Event("m", f"ok{i}", [float(v) for v in X[i]], y[i]) for i in range(n)]


def _poison(rng: random.Random, i: int, label: Any) -> Event:
    """An event that decodes but must not reach the model."""
    if rng.random() < 0.3:
        return Event("m", f"bad{i}", [1.0] * (DIM + 1), label)  # wrong dimension
    return Event("m", f"bad{i}", [BUG, 0.5, -0.5], label)  # the learner breaks mid-update


def _prepare(kind: str, rt: ModelRuntime) -> None:
    X, _ = learners.REGISTRY[kind]._test_stream(DIM, N, SEED)
    rt.learner._test_prepare(X)  # transductive kinds: their block, before any label


def _runtime(kind: str) -> ModelRuntime:
    rt = ModelRuntime.create(_spec(kind), None, [], seen_keep=1000)
    _prepare(kind, rt)
    return rt


def _fingerprint(rt: ModelRuntime) -> tuple[Any, ...]:
    return (
        encode_state(rt.learner.state()),
        encode_state(rt.stats.state()),
        rt.counters.applied,
        rt.counters.ids_sum,
        rt.seen.records(),
    )


@pytest.fixture
def buggy_learners(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Every kind's ``_learn`` and ``learn_many`` scribble over the state, then raise,
    on a row with x[0] == BUG."""
    failure = request.param

    def scribble(learner: Any) -> None:
        for value in vars(learner).values():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                value[...] = 7.0  # half an update: garbage in the live state
        raise failure("a learner bug")

    for cls in set(learners.REGISTRY.values()):
        learn, learn_many = cls._learn, cls.learn_many
        if "learn" in vars(cls):  # a kind's own fast path (pa) that skips ``_learn``
            fast = cls.learn

            def _fast(self, x, y, *, hint=None, _fast=fast):  # type: ignore[no-untyped-def]
                if x[0] == BUG:
                    scribble(self)
                return _fast(self, x, y, hint=hint)

            monkeypatch.setattr(cls, "learn", _fast)

        def _learn(self, x, y, hint, _learn=learn):  # type: ignore[no-untyped-def]
            if x[0] == BUG:
                scribble(self)
            return _learn(self, x, y, hint)

        def _many(self, X, y, *, hints=None, _many=learn_many):  # type: ignore[no-untyped-def]
            if any(row[0] == BUG for row in X):
                scribble(self)
            return _many(self, X, y, hints=hints)

        monkeypatch.setattr(cls, "_learn", _learn)
        monkeypatch.setattr(cls, "learn_many", _many)


@pytest.mark.parametrize("buggy_learners", FAILURES, indirect=True, ids=lambda e: e.__name__)
@pytest.mark.parametrize("kind", sorted(learners.REGISTRY))
def _as_frames(rt: ModelRuntime, items: list[tuple[Event, int, int]]) -> list[tuple[str, str]]:
    """``items`` through ``apply_frame``: one frame per run of rows of one width (a frame
    has one dimension), its rows' outcomes in order."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(items):
        j = i + 1
        while j < len(items) and len(items[j][0].x) == len(items[i][0].x):
            j += 1
        evs = [ev for ev, _, _ in items[i:j]]
        value = wire.encode_frame("m", [e.id for e in evs], [e.x for e in evs],
                                  [e.y for e in evs], ts=0.0)  # fmt: skip
        res = apply_frame(rt, decode_frame(b"m", value), 0, items[j - 1][2])
        assert res.duplicate == res.skipped == 0
        rejected = dict(res.rejected)
        out += [(REJECTED, rejected[k]) if k in rejected else (APPLIED, "") for k in range(j - i)]
        i = j
    return out


@pytest.mark.parametrize("buggy_learners", FAILURES, indirect=True, ids=lambda e: e.__name__)
@pytest.mark.parametrize("kind", sorted(learners.REGISTRY))
def test_poisoned_frames_equal_the_stream_without_the_poison(
    kind: str, buggy_learners: None
) -> None:
    """The same for frames (docs/reliability.md, "Frames"): a row that fails is rejected
    alone, the frame's other rows are learned."""
    test_poisoned_stream_equals_the_stream_without_the_poison(kind, "frames", buggy_learners)


@pytest.mark.parametrize("buggy_learners", FAILURES, indirect=True, ids=lambda e: e.__name__)
@pytest.mark.parametrize("kind", sorted(learners.REGISTRY))
@pytest.mark.parametrize("batched", [True, False], ids=["learn_many", "per-event"])
def test_poisoned_stream_equals_the_stream_without_the_poison(
    kind: str, batched: bool | str, buggy_learners: None
) -> None:
    rng = random.Random(f"{kind}-{batched}")
    clean = _clean_stream(kind, N, SEED)
    stream: list[Event] = []
    for i, ev in enumerate(clean):
        if rng.random() < 0.3:
            stream.append(_poison(rng, i, ev.y))
        stream.append(ev)
    items = [(ev, 0, off) for off, ev in enumerate(stream)]

    rt = _runtime(kind)
    outcomes: list[tuple[str, str]] = []
    if batched == "frames":
        i = 0
        while i < len(items):
            k = rng.randrange(1, 16)
            outcomes += _as_frames(rt, items[i : i + k])
            i += k
    elif batched:
        i = 0
        while i < len(items):  # groups of random sizes, as polls cut the stream
            k = rng.randrange(1, 16)
            outcomes += rt.handle_many(items[i : i + k])
            i += k
    else:
        for item in items:
            outcome = rt.handle(*item)
            outcomes.append((outcome, rt.last_reason if outcome == REJECTED else ""))

    applied = [ev for ev, (o, _) in zip(stream, outcomes, strict=True) if o == APPLIED]
    for ev, (outcome, reason) in zip(stream, outcomes, strict=True):
        if ev.id.startswith("bad"):
            assert outcome == REJECTED and reason, (ev, outcome)
        else:
            assert outcome == APPLIED, (ev, outcome, reason)
    assert rt.counters.rejected == len(stream) - len(clean)

    ref = _runtime(kind)
    for off, ev in enumerate(applied):
        assert ref.handle(ev, 0, off) == APPLIED
    assert _fingerprint(rt) == _fingerprint(ref)
    assert rt.counters.ids_sum == ids_sum([ev.id for ev in applied])


def test_the_issue_record_is_rejected_with_a_readable_reason() -> None:
    """The issue's record (every value 1e308) is refused by the scale guard before any step
    (docs/reliability.md, "The guard"); one the guard lets through (pa's x is not guarded)
    but whose step overflows is undone by the fault boundary. Both leave the model as it
    was, say why, and the next valid event is learned."""
    rt = ModelRuntime.create({"id": "m", "kind": "pa", "dim": 3}, None, [], seen_keep=10)
    before = _fingerprint(rt)
    bad = Event("m", "e1", [1e308, 1e308, 1e308], 1e308)
    [(outcome, reason)] = rt.handle_many([(bad, 0, 0)])
    assert outcome == REJECTED
    assert "refused the event" in reason and "The guard" in reason, reason
    assert _fingerprint(rt) == before
    overflowing = Event("m", "e2", [1e308, 1e308, 1e308], 1.0)
    with np.errstate(over="ignore"):
        [(outcome, reason)] = rt.handle_many([(overflowing, 0, 1)])
    assert outcome == REJECTED
    assert "could not apply the event" in reason and "non-finite" in reason, reason
    assert _fingerprint(rt) == before
    ok = Event("m", "e3", [1.0, 2.0, 3.0], 1.0)
    assert rt.handle_many([(ok, 0, 2)]) == [(APPLIED, "")]


def test_a_nan_left_behind_is_a_fault_even_without_an_exception(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A step that returns normally but leaves NaN in the weights is undone too."""
    rt = ModelRuntime.create({"id": "m", "kind": "pa", "dim": 2}, None, [], seen_keep=10)
    rt.handle(Event("m", "e0", [1.0, 0.0], 1.0), 0, 0)
    before = _fingerprint(rt)
    cls = type(rt.learner)
    original = cls._learn

    def _learn(self, x, y, hint):  # type: ignore[no-untyped-def]
        report = original(self, x, y, hint)
        self.w_[0] = np.nan
        return report

    monkeypatch.setattr(cls, "_learn", _learn)
    assert rt.handle(Event("m", "e1", [0.0, 1.0], 2.0), 0, 1) == REJECTED
    assert "non-finite value" in rt.last_reason and "'w_'" in rt.last_reason
    assert _fingerprint(rt) == before
