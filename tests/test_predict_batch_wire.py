"""The binary predict batch (docs/events.md §7): the documented bytes are the encoder's, and
the API's decoder reads back what the encoder wrote (no Redis, no app: the layout alone)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from clients import wire
from service.api.batch_body import decode_predict_batch
from service.api.errors import InvalidInput

DOC = Path(__file__).resolve().parents[1] / "docs/events.md"


def test_docs_events_md_hex_example_is_the_encoders_output() -> None:
    block = re.search(r"```text\n# predict batch hex\n(.*?)```", DOC.read_text(), flags=re.S)
    assert block, "docs/events.md lost its predict batch hex example"
    documented = bytes.fromhex("".join(ln.split("|")[0] for ln in block.group(1).splitlines()))
    assert documented == wire.encode_predict_batch([[1, 2], [3, 4]], hints=[None, 0.5])


@pytest.mark.parametrize("hints", [None, [None, None, None], [0.5, None, -2.0]])
def test_a_batch_round_trips(hints: list[float | None] | None) -> None:
    X = np.random.default_rng(1).normal(size=(3, 4))
    got, got_hints = decode_predict_batch(wire.encode_predict_batch(X, hints), max_batch=10)
    assert np.array_equal(got, X) and got.flags.writeable and got.flags.c_contiguous
    assert got_hints == (hints or [None] * 3)


def test_all_none_hints_add_no_block() -> None:
    X = [[1.0, 2.0]]
    assert wire.encode_predict_batch(X, [None]) == wire.encode_predict_batch(X)


def test_the_encoder_refuses_what_the_api_would() -> None:
    for X, words in (
        ([1.0, 2.0], "2-d"),
        (np.zeros((0, 3)), "2-d"),
        ([[1.0, float("nan")]], "NaN"),
        ([[1.0, float("inf")]], "NaN or inf"),
    ):
        with pytest.raises(ValueError, match=words):
            wire.encode_predict_batch(X)
    with pytest.raises(ValueError, match="2 hints for 1 rows"):
        wire.encode_predict_batch([[1.0]], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        wire.encode_predict_batch([[1.0]], [float("inf")])


def test_a_frame_is_not_a_batch() -> None:
    frame = wire.encode_frame("m", ["e"], [[1.0, 2.0]], ts=0.0)
    with pytest.raises(InvalidInput, match="magic"):
        decode_predict_batch(frame, max_batch=10)
