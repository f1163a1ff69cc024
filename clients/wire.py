"""The event wire format, written once (docs/events.md): every producer builds and encodes
its records here, and the worker's decoder (``service/worker/events.py``) reads the same
field and type names.

It lives in ``clients/`` because the SDK may not import ``service`` while the service may
import ``clients`` (tests/test_layering.py), and it needs only the standard library (numpy
only inside ``encode_frame``), so importing it pulls in neither httpx nor aiokafka.

A record's key is the model id (UTF-8), so one partition owns a model; its value is
compact UTF-8 JSON (one event) or a binary frame (many examples of one model, §6).

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
import math
import struct
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
# the model's incarnation the producer saw (the API and the SDK set it; optional for other
# producers): a worker never learns a record of another incarnation (docs/events.md §1)
INCARNATION = "incarnation"
MAX_INCARNATION_LEN = 64
# a rollback's options (§4): never learn the events between the version's stamp and the
# rollback; ids never to learn; the stamp of the version the API found (a number Redis
# issued again after losing writes names another state: the worker refuses it)
DISCARD_AFTER = "discard_after"
SKIP_IDS = "skip_ids"
STAMP = "stamp"
MAX_SKIP_IDS = 1000

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
    incarnation: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A labelled (``y``) or unlabelled (``y`` None) example; ``hint`` and ``incarnation``
    only when given, ``extra`` fields (e.g. ``prediction_id``) last."""
    event: dict[str, Any] = {MODEL: model, ID: event_id, X: x, Y: y, TS: _ts(ts)}
    if hint is not None:
        event[HINT] = hint
    if incarnation:
        event[INCARNATION] = incarnation
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
    incarnation: str | None = None,
) -> dict[str, Any]:
    """A label joined to an earlier prediction: an example with a deterministic id (§2)."""
    return example(
        model,
        label_id(prediction_id),
        x,
        y,
        ts=ts,
        hint=hint,
        incarnation=incarnation,
        **{PREDICTION_ID: prediction_id},
    )


def register(
    model: str,
    event_id: str,
    vectors: Sequence[Sequence[float]],
    *,
    ts: float | None = None,
    incarnation: str | None = None,
) -> dict[str, Any]:
    """Register a transductive block of design vectors (§3)."""
    event: dict[str, Any] = {
        MODEL: model,
        ID: event_id,
        TYPE: REGISTER,
        VECTORS: vectors,
        TS: _ts(ts),
    }
    if incarnation:
        event[INCARNATION] = incarnation
    return event


def rollback(
    model: str,
    event_id: str,
    version: int,
    *,
    ts: float | None = None,
    incarnation: str | None = None,
    discard_after: bool = False,
    skip_ids: Sequence[str] = (),
    stamp: tuple[int, int, str] | None = None,
) -> dict[str, Any]:
    """Roll the model back to a kept checkpoint version (§4); ``discard_after``,
    ``skip_ids`` and the version's ``stamp`` (partition, offset, event id) only when given."""
    event: dict[str, Any] = {MODEL: model, ID: event_id, TYPE: ROLLBACK, VERSION: version}
    if discard_after:
        event[DISCARD_AFTER] = True
    if skip_ids:
        event[SKIP_IDS] = list(skip_ids)
    if stamp is not None:
        event[STAMP] = {"partition": stamp[0], "offset": stamp[1], "event_id": stamp[2]}
    event[TS] = _ts(ts)
    if incarnation:
        event[INCARNATION] = incarnation
    return event


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


# ---- binary frames (docs/events.md §6) -----------------------------------------------------
# One record carries many examples of one model: a fixed 32-byte header, then blocks at
# 8-byte aligned offsets, all little-endian, so a reader takes each block as one array.
FRAME_MAGIC = b"\x93OPF"  # 0x93 cannot start UTF-8 text, so no JSON value starts like this
FRAME_VERSION = 1
# magic, version, label kind, flags, reserved (0), n, d, ts, model bytes, id bytes
FRAME_HEADER = struct.Struct("<4sBBBBIIdII")
LABEL_NUMBER, LABEL_BOOL = 0, 1
FLAG_HINTS = 0x01  # header flags: the hints block is present
# header flags: an incarnation block follows the model id (u32 length, UTF-8 bytes, zero
# padding to a multiple of 8); frames without it (every frame before it) read as before
FLAG_INCARNATION = 0x02
INCARNATION_LEN = struct.Struct("<I")
ROW_LABELLED, ROW_HINT = 0x01, 0x02  # row flags
MAX_FRAME_ROWS = 1_000_000


def pad8(n: int) -> int:
    """Bytes of zero padding that bring ``n`` to a multiple of 8."""
    return -n % 8


def is_frame(value: bytes | None) -> bool:
    return value is not None and value[:4] == FRAME_MAGIC


def encode_frame(
    model: str,
    ids: Sequence[str],
    X: Any,
    y: Sequence[Any] | None = None,
    hints: Sequence[float | None] | None = None,
    *,
    ts: float | None = None,
    incarnation: str | None = None,
) -> bytes:
    """One record value carrying ``len(ids)`` examples of ``model`` (docs/events.md §6).

    ``X`` is any 2-d float array-like (n x d); ``y`` None, or an entry None, means
    unlabelled; labels are numbers, or all booleans (then sent as booleans); ``hints``
    entries None mean no hint. ``ts`` (default: now) stamps every row; ``incarnation``
    (the model's, as the API and the SDK send it) goes in the optional block. Raises
    ``ValueError`` for what the worker would refuse as a whole (shapes, ids); values are
    checked by the worker row by row, so a bad row is dead-lettered alone.

    >>> v = encode_frame("m", ["a", "b"], [[1.0, 2.0], [3.0, 4.0]], [0.5, None], ts=0.0)
    >>> v[:4], len(v)
    (b'\\x93OPF', 106)
    """
    import numpy as np  # only frame producers pay for numpy

    arr = np.ascontiguousarray(np.asarray(X, dtype="<f8"))
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"X must be a non-empty 2-d array (n x d), got shape {arr.shape}")
    n, d = arr.shape
    if n > MAX_FRAME_ROWS:
        raise ValueError(f"a frame carries at most {MAX_FRAME_ROWS} rows, got {n}")
    id_list = [str(i) for i in ids]
    if len(id_list) != n:
        raise ValueError(f"got {len(id_list)} ids for {n} rows")
    if any(not 0 < len(i) <= MAX_ID_LEN for i in id_list):
        raise ValueError(f"every id must be a non-empty string of at most {MAX_ID_LEN} chars")
    encoded = [i.encode() for i in id_list]  # a lone surrogate raises UnicodeEncodeError
    model_b = model.encode()
    if not model_b:
        raise ValueError("model must be a non-empty string")
    labels = [None] * n if y is None else list(y)
    hint_list = None if hints is None else list(hints)
    if len(labels) != n or (hint_list is not None and len(hint_list) != n):
        raise ValueError(f"y and hints must have one entry per row ({n})")
    given = [v for v in labels if v is not None]
    kind = LABEL_BOOL if given and all(isinstance(v, bool) for v in given) else LABEL_NUMBER
    row_flags = np.zeros(n, dtype=np.uint8)
    y_arr = np.zeros(n, dtype="<f8")
    for i, v in enumerate(labels):
        if v is not None:
            if isinstance(v, bool) != (kind == LABEL_BOOL):
                raise ValueError("labels must be all numbers or all booleans")
            y_arr[i] = float(v)
            row_flags[i] |= ROW_LABELLED
    flags = 0
    inc_block = b""
    if incarnation:
        inc_b = incarnation.encode()
        if len(inc_b) > MAX_INCARNATION_LEN:
            raise ValueError(f"incarnation must be at most {MAX_INCARNATION_LEN} bytes")
        flags |= FLAG_INCARNATION
        inc_block = INCARNATION_LEN.pack(len(inc_b)) + inc_b
        inc_block += bytes(pad8(len(inc_block)))
    blocks = [arr.tobytes(), y_arr.tobytes()]
    if hint_list is not None and any(h is not None for h in hint_list):
        flags |= FLAG_HINTS
        h_arr = np.zeros(n, dtype="<f8")
        for i, h in enumerate(hint_list):
            if h is not None:
                h_arr[i] = float(h)
                row_flags[i] |= ROW_HINT
        blocks.append(h_arr.tobytes())
    offsets = np.zeros(n + 1, dtype="<u4")
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    id_bytes = b"".join(encoded)
    header = FRAME_HEADER.pack(
        FRAME_MAGIC, FRAME_VERSION, kind, flags, 0, n, d, _ts(ts), len(model_b), len(id_bytes)
    )
    ids_block = offsets.tobytes() + id_bytes
    return b"".join(
        (
            header,
            model_b,
            bytes(pad8(len(model_b))),
            inc_block,
            ids_block,
            bytes(pad8(len(ids_block))),
            *blocks,
            row_flags.tobytes(),
        )
    )


# ---- binary predict batches (docs/events.md §7) --------------------------------------------
# The body of ``POST /v1/models/{id}/predict`` for a batch with no JSON cost: a 16-byte header,
# then the n x d float64 block and, optionally, n float64 hints; little-endian, 8-aligned.
PREDICT_CONTENT_TYPE = "application/vnd.onlinepredict.batch"
PREDICT_MAGIC = b"\x93OPB"  # 0x93 like the frame's (§6): never the start of a JSON body
PREDICT_VERSION = 1
PREDICT_HEADER = struct.Struct("<4sBBHII")  # magic, version, flags, reserved (0), n, d
PREDICT_HINTS = 0x01  # header flags: the hints block is present (NaN: that row has none)


def encode_predict_batch(X: Any, hints: Sequence[float | None] | None = None) -> bytes:
    """The binary body of a predict batch (docs/events.md §7): ``X`` any 2-d float
    array-like (n x d); ``hints`` None, or one entry per row (None: no hint). Raises
    ``ValueError`` for a shape the server would refuse, or a NaN/inf value (as the JSON
    body's encoder does).

    >>> body = encode_predict_batch([[1.0, 2.0], [3.0, 4.0]], hints=[None, 0.5])
    >>> body[:4], len(body)
    (b'\\x93OPB', 64)
    """
    import numpy as np  # only binary producers pay for numpy

    arr = np.ascontiguousarray(np.asarray(X, dtype="<f8"))
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"X must be a non-empty 2-d array (n x d), got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError("X contains NaN or inf: the server refuses non-finite values")
    n, d = arr.shape
    flags = 0
    blocks = [arr.tobytes()]
    if hints is not None:
        h = [math.nan if v is None else float(v) for v in hints]
        if len(h) != n:
            raise ValueError(f"got {len(h)} hints for {n} rows")
        if any(math.isinf(v) for v in h):
            raise ValueError("hints must be finite (None for no hint)")
        if not all(map(math.isnan, h)):
            flags |= PREDICT_HINTS
            blocks.append(np.asarray(h, dtype="<f8").tobytes())
    return PREDICT_HEADER.pack(PREDICT_MAGIC, PREDICT_VERSION, flags, 0, n, d) + b"".join(blocks)
