"""The compact predict answer (docs/events.md §8): the documented bytes are the encoder's;
the server's columns decode to exactly the JSON answer the route would write (the route's
own ``_outputs``, through orjson); anything without an exact column form is left to JSON;
a damaged answer is a ValueError, never another exception (no Redis, no app)."""

from __future__ import annotations

import math
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from clients.batch_answer import (
    decode_answer,
    encode_answer,
    parse_prediction_id,
    prediction_ids,
)
from learners import Prediction
from service.api.batch_answer import compact_answer
from service.api.routes.predict import _outputs

DOC = Path(__file__).resolve().parents[1] / "docs/events.md"
BATCH = "0123456789abcdef0123456789abcdef"


def test_docs_events_md_hex_example_is_the_encoders_output() -> None:
    block = re.search(r"```text\n# predict answer hex\n(.*?)```", DOC.read_text(), flags=re.S)
    assert block, "docs/events.md lost its compact answer hex example"
    documented = bytes.fromhex("".join(ln.split("|")[0] for ln in block.group(1).splitlines()))
    assert documented == encode_answer(BATCH, 7, [1.5, math.nan])
    assert decode_answer(documented) == {
        "predictions": [
            {"value": 1.5, "prediction_id": f"{BATCH}.0", "scores": None},
            {"value": None, "prediction_id": f"{BATCH}.1", "scores": None},
        ],
        "model_version": 7,
    }


def _json(preds: list[Prediction], probas: list[Any] | None) -> dict[str, Any]:
    """What the route answers in JSON for these predictions (batch ``BATCH``, version 3)."""
    out = _outputs(preds, prediction_ids(BATCH, len(preds)), probas)
    return orjson.loads(orjson.dumps({"predictions": out, "model_version": 3}))  # type: ignore[no-any-return]


def _bits(v: Any) -> Any:
    if isinstance(v, float):
        return struct.pack("<d", v)
    if isinstance(v, dict):
        return {k: _bits(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_bits(x) for x in v]
    return (type(v), v)


RNG = np.random.default_rng(18)
CASES: dict[str, tuple[list[Prediction], list[Any] | None]] = {
    "regressor": ([Prediction(float(v)) for v in RNG.normal(size=50) * 1e6], None),
    "regressor, non-finite": (
        [Prediction(v) for v in (1.0, math.nan, math.inf, -math.inf, -0.0, 5e-324)],
        None,
    ),
    "numpy floats with scores": (
        [Prediction(np.float64(v), {"lo": v - 1, "hi": None}) for v in (0.5, 2.0)],
        None,
    ),
    "binary classifier": (
        [Prediction(1 if m > 0 else -1, {"margin": float(m)}) for m in RNG.normal(size=20)],
        [{-1: float(q), 1: float(1 - q)} for q in RNG.uniform(size=20)],
    ),
    "labels of every JSON type": (
        [Prediction(v) for v in (1, 1.0, True, "1", None, 1, "a", np.int64(2), math.nan)],
        None,
    ),
    "three classes": (
        [Prediction(c, {"a": 0.1, "b": math.inf, "c": 3.0}) for c in ("a", "c", "a")],
        [{"a": 0.2, "b": 0.3, "c": 0.5}, {"a": 0.0, "b": 0.0, "c": 1.0}, {"a": 1, "b": 0, "c": 0}],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_columns_decode_to_the_json_answer_bit_for_bit(name: str) -> None:
    preds, probas = CASES[name]
    body = compact_answer(preds, probas, BATCH, 3)
    assert body is not None
    assert _bits(decode_answer(body)) == _bits(_json(preds, probas))


@pytest.mark.parametrize(
    ("preds", "probas"),
    [
        ([Prediction([1, 2])], None),  # a list value: unhashable labels are fine...
        ([Prediction(1, {"m": 1.0}), Prediction(2, None)], None),  # scores on some rows
        ([Prediction(1, {"m": 1.0}), Prediction(2, {"n": 1.0})], None),  # other names
        ([Prediction(1, {"m": 1})], None),  # an int score (JSON 1, not 1.0)
        ([Prediction(1), Prediction(2)], [{1: 0.5, 2: 0.5}, {2: 0.5, 1: 0.5}]),  # order
        ([Prediction(1)], [{1: 0.5, "1": 0.5}]),  # classes equal as strings
    ],
)
def test_no_exact_column_form_is_left_to_json(preds: list[Prediction], probas: Any) -> None:
    body = compact_answer(preds, probas, BATCH, 3)
    if body is not None:  # the one case that has a form: it must be exact
        assert _bits(decode_answer(body)) == _bits(_json(preds, probas))
    else:
        assert preds[0].value != [1, 2]


def test_damaged_answers_are_value_errors() -> None:
    preds, probas = CASES["three classes"]
    good = compact_answer(preds, probas, BATCH, 3)
    assert good is not None
    rng = np.random.default_rng(5)
    for _ in range(300):
        body = bytearray(good)
        at = int(rng.integers(len(body)))
        if rng.integers(2):
            body[at] = int(rng.integers(256))
        else:
            del body[at : at + int(rng.integers(1, 9))]
        try:
            decode_answer(bytes(body))
        except ValueError:
            pass  # a byte flip inside a float block decodes (to another float): fine


def test_prediction_ids_parse_back_and_nothing_else_does() -> None:
    assert [parse_prediction_id(p) for p in prediction_ids(BATCH, 3)] == [
        (BATCH, 0),
        (BATCH, 1),
        (BATCH, 2),
    ]
    for other in (BATCH, f"{BATCH}.01", f"{BATCH}.-1", f"{BATCH.upper()}.0", f"{BATCH}.0\n"):
        assert parse_prediction_id(other) is None, other
