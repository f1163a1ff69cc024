"""The one wire format (clients/wire.py) against the worker's decoder and docs/events.md.

Every shape is encoded with ``clients.wire`` and decoded with what the worker runs
(``service.worker.events.decode_event``); the result must be the event that was sent.
"""

from __future__ import annotations

import json
import math
import pathlib
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import wire
from clients.producer import encode_event, make_event
from service.limits import MAX_ABS_VALUE
from service.store.registry import created_marker
from service.worker.events import Event, decode_event, raw_event_id

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs/events.md"

CASES = {
    "labelled": (
        wire.example("m", "e1", [1.0, -2.5], 0.5, ts=1.0),
        Event("m", "e1", [1.0, -2.5], 0.5, ts=1.0),
    ),
    "labelled-int": (
        wire.example("m", "e2", [1.0], -1, ts=1.0),
        Event("m", "e2", [1.0], -1, ts=1.0),
    ),
    "labelled-bool": (
        wire.example("m", "e3", [1.0], True, ts=1.0),
        Event("m", "e3", [1.0], True, ts=1.0),
    ),
    "unlabelled": (
        wire.example("m", "e4", [0.0, 3.0], None, ts=2.0),
        Event("m", "e4", [0.0, 3.0], None, ts=2.0),
    ),
    "hint": (
        wire.example("m", "e5", [1.0], 2.0, ts=3.0, hint=0.25),
        Event("m", "e5", [1.0], 2.0, ts=3.0, hint=0.25),
    ),
    "label-join": (
        wire.label("m", "p-9", [1.0, 2.0], 1.5, ts=4.0, hint=0.5),
        Event("m", "label:p-9", [1.0, 2.0], 1.5, ts=4.0, hint=0.5),  # prediction_id ignored
    ),
    "register": (
        wire.register("t", "block-7", [[1.0, 0.0], [0.0, 1.0]], ts=5.0),
        Event("t", "block-7", [], None, ts=5.0, type="register", vectors=[[1.0, 0.0], [0.0, 1.0]]),
    ),
    "rollback": (
        wire.rollback("m", "r1", 42, ts=6.0),
        Event("m", "r1", [], None, ts=6.0, type="rollback", version=42),
    ),
    "created": (
        wire.created("m", "5b1e0c"),
        Event("m", "created:5b1e0c", [], None, type="created"),
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_every_shape_round_trips_through_the_worker_decoder(name: str) -> None:
    sent, expected = CASES[name]
    key, value = wire.encode(sent)
    assert key == str(sent["model"]).encode()
    assert decode_event(key, value) == expected
    assert raw_event_id(value) == expected.id  # what a checkpoint stamp records


def test_the_bytes_are_compact_json_keyed_by_model() -> None:
    key, value = wire.encode(wire.label("m", "p", [1.0], 2.0, ts=0.0, hint=0.5))
    assert key == b"m"
    assert value == (
        b'{"model":"m","id":"label:p","x":[1.0],"y":2.0,"ts":0.0,"hint":0.5,"prediction_id":"p"}'
    )
    assert b'"hint"' not in wire.encode_value(wire.example("m", "e", [1.0], ts=0.0))


def test_nan_never_reaches_the_wire() -> None:
    with pytest.raises(ValueError):
        wire.encode_value(wire.example("m", "e", [math.nan], 1.0))


def _doc_examples() -> list[dict[str, object]]:
    """Every JSON line of docs/events.md's ```json blocks, in order."""
    blocks = re.findall(r"```json\n(.*?)```", DOC.read_text(), flags=re.S)
    return [json.loads(line) for block in blocks for line in block.splitlines() if line]


def test_the_builders_write_what_docs_events_md_shows() -> None:
    built = [
        wire.example("sp500", "e-1", [0.01, -0.02, 0.003], 0.004, ts=1700000000.0),
        wire.example("sp500", "e-2", [0.01, -0.02, 0.003], None, ts=1700000001.0, hint=0.2),
        wire.example("sp500", "e-3", {"AMZN": 0.003, "AAPL": 0.01}, 0.004, ts=1700000002.0),
        wire.register("t1", "block-7", [[1.0, 0.0], [0.0, 1.0]], ts=1700000002.0),
        wire.rollback("sp500", "9f0c2d...", 42, ts=1700000003.0),
        wire.created("sp500", "5b1e0c..."),
    ]
    # same fields, values and order (order: the bytes of every producer stay the same)
    assert [list(e.items()) for e in built] == [list(e.items()) for e in _doc_examples()]


def test_the_docs_named_example_maps_to_its_vector() -> None:
    named = _doc_examples()[2]["x"]
    assert isinstance(named, dict)
    index = wire.feature_index(["AAPL", "MSFT", "AMZN"])
    assert wire.dense(named, index) == [0.01, 0.0, 0.003]
    key, value = wire.encode(_doc_examples()[2])
    assert decode_event(key, value).x == named  # the worker's runtime maps it (its spec)


def test_the_registry_marker_is_the_wire_marker() -> None:
    # service/store/registry.py builds the marker it stores as a model's origin itself
    assert created_marker("m", "abc") == wire.created("m", "abc")


def test_the_sdk_producer_writes_wire_examples() -> None:
    assert make_event("m", [1, 2], 0.5, id="e", ts=1.0, hint=0.3) == wire.example(
        "m", "e", [1.0, 2.0], 0.5, ts=1.0, hint=0.3
    )
    assert encode_event is wire.encode_value


_finite = st.floats(-MAX_ABS_VALUE, MAX_ABS_VALUE, allow_nan=False, allow_infinity=False)


@settings(max_examples=200, deadline=None)
@given(
    x=st.lists(_finite, min_size=1, max_size=8),
    y=st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _finite,
    hint=st.none() | _finite,
    event_id=st.text(min_size=1, max_size=wire.MAX_ID_LEN),
    ts=_finite,
)
def test_any_valid_example_round_trips(
    x: list[float], y: object, hint: float | None, event_id: str, ts: float
) -> None:
    key, value = wire.encode(wire.example("m", event_id, x, y, ts=ts, hint=hint))
    assert decode_event(key, value) == Event("m", event_id, x, y, ts=ts, hint=hint)
