"""Worker pieces without a broker: event decoding, the per-model protocol, fault parsing."""

from __future__ import annotations

import json

import pytest

from clients import wire
from service.store import seen as seen_layout
from service.store.checkpoints import Stamp, id_hash
from service.worker.events import InvalidEvent, decode_event, raw_event_id
from service.worker.faults import Faults
from service.worker.runtime import APPLIED, DUPLICATE, REJECTED, SKIPPED, ModelRuntime

SPEC = {"id": "m", "kind": "pa", "dim": 2, "params": {}}


def _raw(**fields: object) -> bytes:
    return json.dumps({"model": "m", "id": "e1", "x": [1.0, 2.0], "y": 0.5, **fields}).encode()


def test_decode_valid_event_and_roundtrip() -> None:
    ev = decode_event(b"m", _raw(hint=0.25, ts=3.0))
    assert (ev.model, ev.id, ev.x, ev.y, ev.hint, ev.ts) == ("m", "e1", [1.0, 2.0], 0.5, 0.25, 3.0)
    key, value = wire.encode(wire.example(ev.model, ev.id, ev.x, ev.y, ts=ev.ts, hint=ev.hint))
    assert decode_event(key, value) == ev
    assert decode_event(b"m", _raw(y=None)).y is None  # unlabelled
    assert decode_event(b"m", _raw(y=True)).y is True


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        (b"m", None, "no value"),
        (b"m", b"\xff\xfe", "not valid JSON"),
        (b"m", b"[1, 2]", "JSON object"),
        (b"m", json.dumps({"id": "e", "x": [1]}).encode(), "'model'"),
        (b"other", _raw(), "record key 'other'"),
        (None, _raw(), "record key None"),
        (b"m", _raw(id=""), "'id'"),
        (b"m", _raw(id="x" * 257), "'id'"),
        (b"m", _raw(x=[]), "'x'"),
        (b"m", _raw(x=[1, "2"]), "'x'"),
        (b"m", _raw(x=[True, 1.0]), "'x'"),
        (b"m", b'{"model":"m","id":"e","x":[Infinity,1],"y":1}', "finite"),
        (b"m", _raw(y=[1]), "'y'"),
        # finite JSON whose squares overflow float64 (the crash loop of issue 13)
        (b"m", _raw(x=[1e308, 1e308], y=1e308), "within ±1e+150"),
        (b"m", _raw(y=-1e151), "'y' must be within ±1e+150"),
        (b"m", _raw(y=10**400), "'y' must be within ±1e+150"),
        (b"m", _raw(hint=1e200), "'hint' must be within ±1e+150"),
        (b"m", _raw(type="register", vectors=[[1, -1e300]]), "'vectors' values must be within"),
        (b"m", _raw(hint="a"), "'hint'"),
        (b"m", _raw(type="reset"), "unknown event type"),
        (b"m", _raw(type="register", vectors=[[1, None]]), "'vectors'"),
    ],
)
def test_decode_rejects_with_a_reason(key, value, fragment) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidEvent) as info:
        decode_event(key, value)
    assert fragment in info.value.reason


def test_raw_event_id_reads_ids_of_invalid_records_too() -> None:
    assert raw_event_id(_raw(x="bad")) == "e1"
    assert raw_event_id(b"{oops") == "" and raw_event_id(None) == ""


def test_runtime_skips_covered_drops_duplicates_rejects_bad_input() -> None:
    rt = ModelRuntime.create(SPEC, None, [], seen_keep=2)
    e1, e2, e3 = (decode_event(b"m", _raw(id=i)) for i in ("a", "b", "c"))
    assert rt.handle(e1, 0, 5) == APPLIED
    assert rt.handle(e1, 0, 5) == SKIPPED  # at or below the stamp: already in the state
    assert rt.handle(e1, 0, 6) == DUPLICATE  # same id again later in the log
    bad = decode_event(b"m", _raw(id="d", x=[1.0, 2.0, 3.0]))
    assert rt.handle(bad, 0, 7) == REJECTED and "dimension 2" in rt.last_reason
    assert rt.handle(e2, 0, 8) == APPLIED and rt.handle(e3, 0, 9) == APPLIED
    assert rt.handle(e1, 0, 10) == APPLIED  # evicted from the 2-id window: learned again
    c = rt.counters
    assert (c.applied, c.duplicate, c.rejected) == (4, 1, 1)
    assert c.ids_sum == (2 * id_hash("a") + id_hash("b") + id_hash("c")) % 2**64
    assert rt.stamp == Stamp(0, 10, "a")
    # the window holds the last 2 ids applied, "c" and "a" (applied 3rd and 4th)
    assert rt.seen.records() == seen_layout.of_ids([(3, "c"), (4, "a")])
    assert rt.seen.pending() == rt.seen.records()  # what the next checkpoint appends


def test_faults_parse_and_refuse_unknown_points() -> None:
    f = Faults("after_learn=0.5, after_commit")
    assert f.rates == {"after_learn": 0.5, "after_commit": 1.0}
    with pytest.raises(ValueError, match="unknown fault point"):
        Faults("somewhere=1")
    Faults("").hit("after_learn")  # no faults: nothing happens


# ---- handle_many: the batched path equals the loop of handle ------------------------------
_KINDS = {"pa": {}, "vaw": {}, "nemsis": {}}


def _event(i: int, ident: str, bad: str, kind: str):  # type: ignore[no-untyped-def]
    from service.worker.events import Event

    x = [((i * 7919) % 13) / 6.0 - 1.0, ((i * 104729) % 7) / 3.0 - 1.0]
    y: object = (1 if i % 3 else -1) if kind == "nemsis" else x[0] - 0.5 * x[1]
    if bad == "dim":
        x = [*x, 1.0]
    elif bad == "label":
        y = "no"
    elif bad == "unlabelled":
        y = None  # a regressor refuses it, a quantifier learns from it
    return Event("m", ident, x, y, hint=0.0 if bad == "hint" else None)


def _runtime(kind: str, keep: int) -> ModelRuntime:
    spec = {"id": "m", "kind": kind, "dim": 2, "params": _KINDS[kind]}
    return ModelRuntime.create(spec, None, [], seen_keep=keep)


def _snapshot(rt: ModelRuntime):  # type: ignore[no-untyped-def]
    from learners.codec import encode_state

    return (
        encode_state(rt.learner.state()),
        encode_state(rt.stats.state()),
        vars(rt.counters),
        rt.seen.records(),
        rt.seen.pending(),
        rt.stamp,
        rt.dirty,
    )


@pytest.mark.parametrize("kind", sorted(_KINDS))
@pytest.mark.parametrize("keep", [0, 2, 5, 8, 50])
@pytest.mark.parametrize("seed", range(6))
def test_handle_many_equals_the_loop_of_handle(kind: str, keep: int, seed: int) -> None:
    import random

    rng = random.Random(seed)
    n = 60
    ids = [f"e{rng.randrange(12)}" for _ in range(n)]  # many repeats: duplicates, evictions
    bads = [rng.choice(["", "", "", "", "", "dim", "label", "unlabelled", "hint"]) for _ in ids]
    events = [
        _event(i, ident, bad, kind) for i, (ident, bad) in enumerate(zip(ids, bads, strict=True))
    ]
    start = rng.randrange(5)  # the first offsets are covered by a restored stamp
    items = [(ev, 0, 100 + i) for i, ev in enumerate(events)]
    loop, many = _runtime(kind, keep), _runtime(kind, keep)
    loop.stamp = many.stamp = Stamp(0, 100 + start - 1, "restored") if start else None
    expected = [(loop.handle(ev, p, o), loop.last_reason) for ev, p, o in items]
    expected = [(o, r if o == REJECTED else "") for o, r in expected]
    got = []
    i = 0
    while i < n:  # random group sizes, as polls cut the stream
        k = rng.randrange(1, 12)
        got.extend(many.handle_many(items[i : i + k]))
        i += k
    assert got == expected
    assert _snapshot(many) == _snapshot(loop)
    assert {o for o, _ in got} >= {APPLIED, REJECTED}


@pytest.mark.parametrize(
    ("x", "reason"),
    [
        ([1.0, -2.5, 0], None),
        ([1e150, -1e150, 5e-324], None),  # the bound itself is allowed
        ([6e149, 6e149, 6e149], None),  # hypot above half the bound: the exact checks pass it
        ([10**150], None),  # an int at the bound
        ([1.0000001e150, 0.0], "within"),
        ([0.0, -2e150], "within"),
        ([10**150 + 10**140], "within"),
        ([1e308, 1e308], "within"),  # hypot finite, beyond the bound
        ([float("nan"), 1.0], "finite"),
        ([float("inf"), float("nan")], "finite"),
        ([10**400, 1.0], "OverflowError"),  # beyond the float range: malformed, as before
    ],
)
def test_decode_bounds_x_with_the_same_reasons_on_the_fast_check(
    x: list[float], reason: str | None
) -> None:
    value = json.dumps({"model": "m", "id": "e1", "x": x, "y": 1.0}).encode()
    if reason is None:
        assert decode_event(b"m", value).x == [float(v) for v in x]
    else:
        with pytest.raises(InvalidEvent, match=reason):
            decode_event(b"m", value)


def _decoded(decode, key, value):  # type: ignore[no-untyped-def]
    """What a decoder makes of a record: the event with its fields' types, or the reason."""
    try:
        ev = decode(key, value)
    except InvalidEvent as exc:
        return ("invalid", exc.reason, exc.model)
    x = ev.x if type(ev.x) is dict else [(type(v), v) for v in ev.x]
    fields = (ev.model, ev.id, ev.y, ev.ts, ev.hint, ev.type, ev.vectors, ev.version)
    return ("event", x, [(type(f), f) for f in fields])


_EDGES: list[tuple[bytes | None, bytes | None]] = [
    (b"m", _raw()),
    (b"m", _raw(ts=1.5)),
    (b"m", _raw(ts=2)),  # an int ts: the whole decoder makes it a float
    (b"m", _raw(ts=None, hint=None)),
    (b"m", _raw(y=3)),
    (b"m", _raw(y=True)),
    (b"m", _raw(y=None)),
    (b"m", _raw(y=1e150)),
    (b"m", _raw(y=-1e150)),
    (b"m", _raw(y=1.0000001e150)),
    (b"m", _raw(y=10**151)),
    (b"m", _raw(y="1")),
    (b"m", _raw(hint=0.5)),
    (b"m", _raw(x=[1, 2])),
    (b"m", _raw(x=[True, 2.0])),
    (b"m", _raw(x=[1e308, 1e308])),
    (b"m", _raw(x=[10**400, 1])),
    (b"m", _raw(x=[5e149, 5e149])),
    (b"m", _raw(x={"a": 1.0})),
    (b"m", _raw(x=[])),
    (b"m", _raw(id="é")),
    (b"m", _raw(id="i" * 256)),
    (b"m", _raw(id="i" * 257)),
    (b"m", _raw(id="")),
    (b"m", _raw(id=7)),
    (b"m", _raw(model="")),
    (b"m", _raw(type="created")),
    (b"m", _raw(type="example")),
    (b"m", _raw(type=None)),
    (b"m", _raw(type="rollback", version=2)),
    (b"x", _raw()),
    (None, _raw()),
    (b"m", None),
    (b"m", b"[]"),
    (b"m", b'"m"'),
    (b"m", b"{bad"),
    (b"m", b'{"model":"m","id":"e","x":[NaN],"y":1}'),
    (b"m", b'{"model":"m","id":"e","x":[1.0],"y":1,"ts":Infinity}'),
    (b"m", b'{"model":"m","id":"e","x":[1.0],"y":1,"model":"n"}'),  # repeated key
    (b"m", b'{"model":"m","id":"\\ud800","x":[1.0],"y":1}'),  # a lone surrogate
]


@pytest.mark.parametrize(("key", "value"), _EDGES)
def test_decode_inline_path_equals_the_whole_decoder(key, value) -> None:  # type: ignore[no-untyped-def]
    from service.worker.events import decode_event_full

    assert _decoded(decode_event, key, value) == _decoded(decode_event_full, key, value)


def test_decode_inline_path_equals_the_whole_decoder_on_the_fuzz_grammar() -> None:
    """Every record of the event fuzz grammar (valid, near-valid, hostile), for a
    regression and a classification kind: the same event, or the same reason."""
    import random

    from service.worker.events import decode_event_full
    from tests.chaos._fuzz_grammar import Grammar, target

    seen = {"event": 0, "invalid": 0}
    for kind in ("pa", "arow"):
        g = Grammar(random.Random(7), target(kind, "fz", 3))
        for rec in g.opening() + [g.record() for _ in range(3000)]:
            got = _decoded(decode_event, rec.key, rec.value)
            assert got == _decoded(decode_event_full, rec.key, rec.value), rec.show()
            seen[got[0]] += 1
    assert min(seen.values()) > 500, seen  # both outcomes well represented
