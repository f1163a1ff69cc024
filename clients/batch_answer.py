"""The compact answer of ``POST /v1/models/{id}/predict`` (docs/events.md §8) and the batch
form of prediction ids.

A client that sends ``Accept: application/vnd.onlinepredict.predictions`` gets its
predictions as columns (values as one float64 block, class probabilities and scores as
n x k float64 blocks) instead of one JSON object per row; :func:`decode_answer` turns it
back into the JSON answer's dict, value for value, so the SDK's result does not depend on
which of the two came.

Prediction ids are ``<batch id>.<row>``: one random 128-bit batch id per request (32
lowercase hex digits) and the row's index in decimal, so the answer carries one id for
the whole batch and the API stores the batch's rows as one Redis record (docs/design.md,
"Redis keys").

Only the standard library here, numpy inside the functions that need it (as ``wire``).
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any

ANSWER_CONTENT_TYPE = "application/vnd.onlinepredict.predictions"
ANSWER_MAGIC = b"\x93OPP"  # 0x93 as the batch body's (§7): never the start of a JSON answer
ANSWER_VERSION = 1
# magic, version, flags, reserved (0), n, k classes, s scores, meta bytes, model version,
# batch id (16 bytes): 48 bytes, so every block after it starts 8-aligned
ANSWER_HEADER = struct.Struct("<4sBBHIIIIQ16s")
LABELS = 0x01  # the values block holds int64 indices into meta "labels" (else float64 values)
PROBABILITIES = 0x02  # an n x k float64 block of class probabilities, meta "classes"
SCORES = 0x04  # an n x s float64 block of scores, meta "scores"; NaN: null

_PREDICTION_ID = re.compile(r"([0-9a-f]{32})\.(0|[1-9][0-9]{0,9})")


def prediction_ids(batch: str, n: int) -> list[str]:
    """The ids of a batch's n predictions: ``<batch>.<row>``."""
    prefix = batch + "."
    return [prefix + str(i) for i in range(n)]


def parse_prediction_id(prediction_id: str) -> tuple[str, int] | None:
    """(batch id, row) of an id in the batch form; None for any other string (an id of the
    per-row form before batches, or no id at all). The row is canonical decimal (no sign,
    no leading zero), so one prediction has one id, hence one label event id."""
    m = _PREDICTION_ID.fullmatch(prediction_id)
    return None if m is None else (m.group(1), int(m.group(2)))


def _pad8(n: int) -> bytes:
    return bytes(-n % 8)


def encode_answer(
    batch: str,
    model_version: int,
    values: Any,
    *,
    labels: list[Any] | None = None,
    classes: list[str] | None = None,
    probabilities: Any = None,
    score_names: list[str] | None = None,
    scores: Any = None,
) -> bytes:
    """The compact answer: ``values`` n float64 values (NaN: null), or, with ``labels``
    (the distinct JSON values), n int64 indices into them; ``probabilities`` n x k for
    ``classes`` (the JSON keys, in order); ``scores`` n x s for ``score_names`` (NaN:
    null). The caller has made every block's numbers exactly the JSON answer's."""
    import numpy as np

    vals = np.ascontiguousarray(values, dtype="<i8" if labels is not None else "<f8")
    n = len(vals)
    flags, meta, blocks = 0, {}, [vals.tobytes()]
    k = s = 0
    if labels is not None:
        flags |= LABELS
        meta["labels"] = labels
    if classes is not None:
        flags |= PROBABILITIES
        meta["classes"] = classes
        k = len(classes)
        blocks.append(np.ascontiguousarray(probabilities, dtype="<f8").reshape(n, k).tobytes())
    if score_names is not None:
        flags |= SCORES
        meta["scores"] = score_names
        s = len(score_names)
        blocks.append(np.ascontiguousarray(scores, dtype="<f8").reshape(n, s).tobytes())
    meta_b = json.dumps(meta, separators=(",", ":"), allow_nan=False).encode() if meta else b""
    header = ANSWER_HEADER.pack(
        ANSWER_MAGIC, ANSWER_VERSION, flags, 0, n, k, s, len(meta_b), model_version,
        bytes.fromhex(batch),
    )  # fmt: skip
    return b"".join((header, meta_b, _pad8(len(meta_b)), *blocks))


def decode_answer(body: bytes) -> dict[str, Any]:
    """The JSON answer's dict (``{"predictions": [...], "model_version"}``) of a compact
    answer: floats bit for bit, NaN back to None, labels as their JSON values. Raises
    ``ValueError`` for anything not in the layout."""
    try:
        return _decode(body)
    except (KeyError, IndexError, TypeError) as exc:  # a meta section that does not fit
        raise ValueError(f"a compact answer whose meta section does not fit: {exc!r}") from None


def _decode(body: bytes) -> dict[str, Any]:
    import numpy as np

    if len(body) < ANSWER_HEADER.size:
        raise ValueError(f"a compact answer of {len(body)} bytes is shorter than its header")
    magic, version, flags, reserved, n, k, s, m, model_version, raw_batch = (
        ANSWER_HEADER.unpack_from(body)
    )
    if magic != ANSWER_MAGIC or version != ANSWER_VERSION or reserved or flags & ~7:
        raise ValueError(f"not a version {ANSWER_VERSION} compact answer: {body[:8].hex()}")
    at = ANSWER_HEADER.size
    meta = json.loads(body[at : at + m]) if m else {}
    at += m + len(_pad8(m))
    k, s = (k if flags & PROBABILITIES else 0), (s if flags & SCORES else 0)
    if len(body) != at + 8 * n * (1 + k + s):
        raise ValueError(f"a compact answer of {len(body)} bytes; its header says otherwise")

    def block(dtype: str, width: int) -> Any:
        nonlocal at
        arr = np.frombuffer(body, dtype, n * width, at).reshape(n, width)
        at += 8 * n * width
        return arr

    def floats(arr: Any) -> list[list[float | None]]:
        return [[None if v != v else v for v in row] for row in arr.tolist()]  # NaN: null

    if flags & LABELS:
        labels = meta["labels"]
        values = [labels[i] for i in block("<i8", 1)[:, 0].tolist()]
    else:
        values = [None if v != v else v for v in block("<f8", 1)[:, 0].tolist()]
    ids = prediction_ids(raw_batch.hex(), n)
    out = [
        {"value": v, "prediction_id": pid, "scores": None}
        for v, pid in zip(values, ids, strict=True)
    ]
    if flags & PROBABILITIES:
        classes = meta["classes"]
        for item, row in zip(out, floats(block("<f8", k)), strict=True):
            item["probabilities"] = dict(zip(classes, row, strict=True))
    if flags & SCORES:
        names = meta["scores"]
        for item, row in zip(out, floats(block("<f8", s)), strict=True):
            item["scores"] = dict(zip(names, row, strict=True))
    return {"predictions": out, "model_version": model_version}
