"""The incarnation on the wire (docs/events.md §1 and §6; issue 32): JSON events, labels,
blocks and rollbacks carry it when given, a frame in its flagged block; frames without it
(every frame written before it) read as before."""

from __future__ import annotations

import json

import pytest

from clients import wire
from service.worker.events import InvalidEvent, decode_event, raw_event_id
from service.worker.frames import decode_frame, frame_event_id
from tests._frames import frame_rows


def test_json_events_carry_the_incarnation_only_when_given() -> None:
    assert wire.INCARNATION not in wire.example("m", "e1", [1.0], 0.5, ts=0.0)
    for event in (
        wire.example("m", "e1", [1.0], 0.5, ts=0.0, incarnation="abc"),
        wire.label("m", "p.0", [1.0], 0.5, ts=0.0, incarnation="abc"),
        wire.register("m", "b1", [[1.0]], ts=0.0, incarnation="abc"),
        wire.rollback("m", "r1", 3, ts=0.0, incarnation="abc"),
    ):
        assert decode_event(*wire.encode(event)).incarnation == "abc"
    assert decode_event(*wire.encode(wire.example("m", "e1", [1.0], 0.5))).incarnation is None


@pytest.mark.parametrize("bad", [7, "", "x" * 65, ["a"]])
def test_a_malformed_incarnation_is_an_invalid_event(bad: object) -> None:
    event = {**wire.example("m", "e1", [1.0], 0.5, ts=0.0), "incarnation": bad}
    with pytest.raises(InvalidEvent, match="'incarnation' must be a string"):
        decode_event(b"m", json.dumps(event).encode())


@pytest.mark.parametrize("incarnation", ["5b1e0c" * 5, "i", "ü" * 10])
def test_a_frame_carries_the_incarnation_in_its_block(incarnation: str) -> None:
    value = wire.encode_frame(
        "model", ["a", "b"], [[1.0, 2.0], [3.0, 4.0]], [0.5, None], ts=0.0, incarnation=incarnation
    )
    assert value[6] & wire.FLAG_INCARNATION
    frame = decode_frame(b"model", value)
    assert frame.incarnation == incarnation and frame.ids == ["a", "b"]
    assert frame.X.tolist() == [[1.0, 2.0], [3.0, 4.0]] and frame.labels() == [0.5, None]
    assert frame_event_id(value) == raw_event_id(value) == "b"
    assert frame.row_event(0)["incarnation"] == incarnation
    assert [r["incarnation"] for r in frame_rows(value)] == [incarnation] * 2  # the table's reading


def test_a_frame_without_the_block_reads_as_before() -> None:
    value = wire.encode_frame("m", ["e1"], [[1.0, 2.0]], [1.0], ts=0.0)
    assert not value[6] & wire.FLAG_INCARNATION
    assert decode_frame(b"m", value).incarnation is None
    with pytest.raises(ValueError, match="at most 64 bytes"):
        wire.encode_frame("m", ["e1"], [[1.0]], ts=0.0, incarnation="x" * 65)


def test_a_cut_incarnation_block_is_an_invalid_frame() -> None:
    value = bytearray(wire.encode_frame("m", ["e1"], [[1.0]], [1.0], ts=0.0, incarnation="abc"))
    at = wire.FRAME_HEADER.size + 8  # after "m" and its padding
    value[at : at + 4] = (200).to_bytes(4, "little")  # a length beyond the 64-byte bound
    with pytest.raises(InvalidEvent, match="incarnation must be 1-64 bytes"):
        decode_frame(b"m", bytes(value))
