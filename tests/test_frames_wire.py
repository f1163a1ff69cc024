"""Frames (docs/events.md §6): ``clients.wire.encode_frame`` against the worker's decoder
(``service.worker.frames``) and the documented layout. A broken frame is an
``InvalidEvent`` with a clear reason, never another exception (it would stop a worker)."""

from __future__ import annotations

import math
import pathlib
import re
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import wire
from service.limits import MAX_ABS_VALUE
from service.worker.events import InvalidEvent, raw_event_id
from service.worker.frames import decode_frame, frame_event_id
from tests._frames import frame_rows

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs/events.md"


def _frame(**kw: object) -> bytes:
    args: dict[str, object] = {
        "model": "m",
        "ids": ["a", "b", "c"],
        "X": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]],
        "y": [0.5, None, -1.0],
        "ts": 7.0,
    }
    args.update(kw)
    return wire.encode_frame(**args)  # type: ignore[arg-type]


def _reason(key: bytes | None, value: bytes) -> str:
    with pytest.raises(InvalidEvent) as info:
        decode_frame(key, value)
    return info.value.reason


def test_a_frame_round_trips() -> None:
    value = _frame(hints=[None, 0.25, 1.5])
    f = decode_frame(b"m", value)
    assert f.model == "m" and f.ids == ["a", "b", "c"] and f.ts == 7.0
    assert f.X.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]] and f.X.flags.writeable
    assert f.labels() == [0.5, None, -1.0] and f.hint_list() == [None, 0.25, 1.5]
    assert not f.bad
    assert frame_event_id(value) == raw_event_id(value) == "c"  # a stamp's id: the last row's
    assert f.row_event(1) == {"model": "m", "id": "b", "x": [3.0, 4.0], "y": None, "ts": 7.0,
                              "hint": 0.25}  # fmt: skip
    assert [f.row_event(i) for i in range(3)] == frame_rows(value)  # the layout table's reading


def test_boolean_labels_and_unicode_ids() -> None:
    f = decode_frame(b"m", _frame(ids=["é", "日本", "x"], y=[True, False, None]))
    assert f.ids == ["é", "日本", "x"] and f.labels() == [True, False, None]


@pytest.mark.parametrize(
    "ids",
    [
        ["e-0001", "e-0002", "e-0003"],  # one width: the fixed-width path
        ["a\0", "b\0", "\0c"],  # one width with NULs: numpy's bytes would drop them
        ["a", "bb", "ccc"],
        ["é1", "é2", "é3"],  # one width in characters, not ASCII
    ],
)
def test_ids_of_every_shape_round_trip(ids: list[str]) -> None:
    assert decode_frame(b"m", _frame(ids=ids)).ids == ids


def test_a_json_value_is_never_a_frame() -> None:
    assert not wire.is_frame(b'{"model":"m"}') and wire.is_frame(_frame())
    with pytest.raises(UnicodeDecodeError):
        wire.FRAME_MAGIC.decode()  # 0x93 cannot start UTF-8 text, so no JSON value


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda v: v[:20], "shorter than the 32-byte header"),
        (lambda v: v[:-1], "layout takes"),
        (lambda v: v + b"\0", "layout takes"),
        (lambda v: b"\x93OPG" + v[4:], "magic"),
        (lambda v: v[:4] + b"\x02" + v[5:], "version 2 is not supported"),
        (lambda v: v[:5] + b"\x07" + v[6:], "label kind 7"),
        (lambda v: v[:6] + b"\x80" + v[7:], "unknown header flags"),
        (lambda v: v[:7] + b"\x01" + v[8:], "reserved byte 1"),
        (lambda v: v[:8] + struct.pack("<I", 0) + v[12:], "rows must be"),
        (lambda v: v[:12] + struct.pack("<I", 3) + v[16:], "layout takes"),  # wrong shape
        (lambda v: v[:16] + struct.pack("<d", math.inf) + v[24:], "'ts' must be finite"),
        (lambda v: v[:-1] + b"\x04", "row flags"),
        (lambda v: v[:-1] + b"\x02", "no hints block"),
    ],
)
def test_a_broken_structure_is_refused_with_a_reason(mutate: object, words: str) -> None:
    assert words in _reason(b"m", mutate(_frame()))  # type: ignore[operator]


def test_bad_ids_are_refused() -> None:
    v = bytearray(_frame())
    at = 32 + 8  # model "m" + padding; then 4 offsets
    struct.pack_into("<I", v, at + 4, 0)  # the second id would be empty
    assert "1-256 characters" in _reason(b"m", bytes(v))
    v = bytearray(_frame())
    v[at + 16] = 0xFF  # the first id byte: not UTF-8
    assert "not UTF-8" in _reason(b"m", bytes(v))
    v = bytearray(_frame(ids=["é", "b", "c"]))
    struct.pack_into("<I", v, at + 4, 1)  # splits the two-byte "é"
    assert "splits a UTF-8 character" in _reason(b"m", bytes(v)) or "not UTF-8" in _reason(
        b"m", bytes(v)
    )
    with pytest.raises(ValueError, match="at most 256"):
        wire.encode_frame("m", ["a" * 257], [[1.0]])


def test_the_key_must_be_the_model() -> None:
    assert "must be the model id" in _reason(b"other", _frame())
    assert "must be the model id" in _reason(None, _frame())


def test_bad_values_are_refused_row_by_row_with_the_json_words() -> None:
    X = np.ones((6, 2))
    X[1, 0] = math.nan
    X[2, 1] = -math.inf
    X[3, 0] = 2e150
    y: list[object] = [1.0, 1.0, 1.0, 1.0, 1e300, 1.0]
    hints: list[float | None] = [None] * 5 + [math.inf]
    f = decode_frame(b"m", wire.encode_frame("m", list("abcdef"), X, y, hints))
    assert sorted(f.bad) == [1, 2, 3, 4, 5]
    assert "only finite numbers" in f.bad[1] and "only finite numbers" in f.bad[2]
    assert "within ±1e+150" in f.bad[3] and f.bad[4].startswith("'y'")
    assert f.bad[5].startswith("'hint'")
    ok = decode_frame(b"m", wire.encode_frame("m", ["a"], [[MAX_ABS_VALUE, -MAX_ABS_VALUE]], [0.0]))
    assert not ok.bad  # the bound itself is allowed, as in JSON


def test_a_boolean_frame_takes_only_0_and_1() -> None:
    v = bytearray(_frame(y=[True, False, True]))
    y_at = len(v) - 3 - 3 * 8
    struct.pack_into("<d", v, y_at, 0.5)
    assert decode_frame(b"m", bytes(v)).bad == {0: "'y' of a boolean frame must be 0 or 1"}


def test_the_encoder_refuses_what_cannot_be_a_frame() -> None:
    with pytest.raises(ValueError, match="2-d"):
        wire.encode_frame("m", ["a"], [1.0, 2.0])
    with pytest.raises(ValueError, match="ids"):
        wire.encode_frame("m", ["a"], [[1.0], [2.0]])
    with pytest.raises(ValueError, match="all numbers or all booleans"):
        wire.encode_frame("m", ["a", "b"], [[1.0], [2.0]], [True, 1.0])


def test_docs_events_md_hex_example_is_the_encoders_output() -> None:
    text = DOC.read_text()
    block = re.search(r"```text\n# frame hex\n(.*?)```", text, flags=re.S)
    assert block, "docs/events.md lost its frame hex example"
    documented = bytes.fromhex("".join(ln.split("|")[0] for ln in block.group(1).splitlines()))
    built = wire.encode_frame(
        "m", ["e1", "e2"], [[1.0, 2.0], [3.0, 4.0]], [0.5, None], [None, 1.0], ts=0.0
    )
    assert documented == built


_finite = st.floats(-MAX_ABS_VALUE, MAX_ABS_VALUE, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    n=st.integers(1, 6),
    d=st.integers(1, 5),
    ids=st.lists(st.text(min_size=1, max_size=20), min_size=6, max_size=6),
)
def test_any_valid_frame_round_trips(data: st.DataObject, n: int, d: int, ids: list[str]) -> None:
    ids = [i for i in ids if i.encode(errors="ignore") and _utf8(i)][:n]
    n = len(ids)
    if not n:
        return
    X = data.draw(st.lists(st.lists(_finite, min_size=d, max_size=d), min_size=n, max_size=n))
    y = data.draw(st.lists(st.none() | _finite, min_size=n, max_size=n))
    hints = data.draw(st.none() | st.lists(st.none() | _finite, min_size=n, max_size=n))
    f = decode_frame(b"m", wire.encode_frame("m", ids, X, y, hints, ts=1.0))
    assert f.ids == ids and f.X.tolist() == X and f.labels() == y and not f.bad
    assert f.hint_list() == (None if hints is None or all(h is None for h in hints) else hints)


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_the_magic_never_raise_anything_else(tail: bytes) -> None:
    value = wire.FRAME_MAGIC + tail
    try:
        decode_frame(b"m", value)
    except InvalidEvent as exc:
        assert exc.reason
    frame_event_id(value)  # never raises


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_frames_never_raise_anything_else(data: st.DataObject) -> None:
    v = bytearray(_frame(hints=[1.0, None, 2.0]))
    for _ in range(data.draw(st.integers(1, 4))):
        v[data.draw(st.integers(0, len(v) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(v)))
    for value in (bytes(v), bytes(v[:cut])):
        try:
            f = decode_frame(b"m", value)
        except InvalidEvent as exc:
            assert exc.reason
        else:
            assert len(f.ids) == f.X.shape[0] == len(f.labels())
        frame_event_id(value)
