"""The event wire format, written once (docs/events.md): every producer builds and encodes
its records here, and the worker's decoder (``service/worker/events.py``) reads the same
field and type names.

It lives in ``clients/`` because the SDK may not import ``service`` while the service may
import ``clients`` (tests/test_layering.py), and it needs only the standard library, so
importing it pulls in neither httpx nor aiokafka.

A record's key is the model id (UTF-8), so one partition owns a model; its value is
compact UTF-8 JSON.

Examples
--------
>>> encode(example("m", "e1", [1.0, 2.0], 0.5, ts=0.0))
(b'm', b'{"model":"m","id":"e1","x":[1.0,2.0],"y":0.5,"ts":0.0}')
>>> encode_value(rollback("m", "r1", 3, ts=0.0))
b'{"model":"m","id":"r1","type":"rollback","version":3,"ts":0.0}'

``x`` is a list of ``dim`` numbers, or, for a model created with ``features``, an object
``{name: value}`` (§1): :func:`dense` turns it into the list, names missing being 0.

>>> dense({"b": 2.0}, feature_index(["a", "b", "c"]))
[0.0, 2.0, 0.0]
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any

# Field names (docs/events.md, the tables of §1-4).
MODEL = "model"
ID = "id"
X = "x"
Y = "y"
TS = "ts"
HINT = "hint"
TYPE = "type"
VECTORS = "vectors"
VERSION = "version"
PREDICTION_ID = "prediction_id"

# Values of ``type``; an event without one is an example (§1).
REGISTER = "register"
ROLLBACK = "rollback"
CREATED = "created"
CONTROL_TYPES = (REGISTER, ROLLBACK, CREATED)

MAX_ID_LEN = 256
LABEL_ID_PREFIX = "label:"  # deterministic: a label produced twice is deduped (§2)
CREATED_ID_PREFIX = "created:"


def feature_index(features: Sequence[str]) -> dict[str, int]:
    """Each feature name's position in ``x`` (the model's ``features`` order)."""
    return {name: i for i, name in enumerate(features)}


def dense(x: Mapping[str, float], index: Mapping[str, int]) -> list[float]:
    """The list form of an object ``x`` (§1): names missing from it are 0. Raises
    ``ValueError`` naming the names that are not features (the API's 422 and the worker's
    dead-letter reason say the same)."""
    row = [0.0] * len(index)
    try:
        for name, value in x.items():
            row[index[name]] = value
    except (KeyError, TypeError):  # TypeError: an unhashable name (not from JSON)
        raise ValueError(unknown_features(x, index)) from None
    return row


def unknown_features(x: Mapping[str, float], index: Mapping[str, int]) -> str:
    """Why ``x`` does not fit ``index``: its names that are not features (ten at most)."""
    unknown = [repr(name) for name in x if not isinstance(name, str) or name not in index]
    more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
    known = ", ".join(map(repr, islice(index, 10))) + (", ..." if len(index) > 10 else "")
    return f"x names unknown features {', '.join(unknown[:10])}{more} (features: {known})"


def no_features(dim: int) -> str:
    """Why an object ``x`` cannot go to a model created without ``features``."""
    return (
        f"x is an object, but the model has no feature names: send x as a list of {dim}"
        " numbers, or create the model with 'features'"
    )


def _ts(ts: float | None) -> float:
    return time.time() if ts is None else float(ts)  # every producer stamps "now" (§1)


def example(
    model: str,
    event_id: str,
    x: Sequence[float] | Mapping[str, float],
    y: Any = None,
    *,
    ts: float | None = None,
    hint: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A labelled (``y``) or unlabelled (``y`` None) example; ``hint`` only when given,
    ``extra`` fields (e.g. ``prediction_id``) last."""
    event: dict[str, Any] = {MODEL: model, ID: event_id, X: x, Y: y, TS: _ts(ts)}
    if hint is not None:
        event[HINT] = hint
    event.update(extra)
    return event


def label_id(prediction_id: str) -> str:
    return LABEL_ID_PREFIX + prediction_id


def label(
    model: str,
    prediction_id: str,
    x: Sequence[float],
    y: Any,
    *,
    ts: float | None = None,
    hint: float | None = None,
) -> dict[str, Any]:
    """A label joined to an earlier prediction: an example with a deterministic id (§2)."""
    return example(
        model, label_id(prediction_id), x, y, ts=ts, hint=hint, **{PREDICTION_ID: prediction_id}
    )


def register(
    model: str, event_id: str, vectors: Sequence[Sequence[float]], *, ts: float | None = None
) -> dict[str, Any]:
    """Register a transductive block of design vectors (§3)."""
    return {MODEL: model, ID: event_id, TYPE: REGISTER, VECTORS: vectors, TS: _ts(ts)}


def rollback(model: str, event_id: str, version: int, *, ts: float | None = None) -> dict[str, Any]:
    """Roll the model back to a kept checkpoint version (§4)."""
    return {MODEL: model, ID: event_id, TYPE: ROLLBACK, VERSION: version, TS: _ts(ts)}


def created(model: str, incarnation: str) -> dict[str, Any]:
    """A model's creation marker (§5); no ``ts``: nothing reads one."""
    return {MODEL: model, ID: CREATED_ID_PREFIX + incarnation, TYPE: CREATED}


def encode_key(model: str) -> bytes:
    return model.encode()


def encode_value(event: Mapping[str, Any]) -> bytes:
    # allow_nan=False: NaN/inf must be refused before producing, never put on the wire
    return json.dumps(event, separators=(",", ":"), allow_nan=False).encode()


def encode(event: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(key, value) of one record."""
    return encode_key(str(event[MODEL])), encode_value(event)
