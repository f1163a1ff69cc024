"""The predict route's compact answer (docs/events.md §8, ``clients.batch_answer``).

:func:`wants_compact` reads the request's ``Accept``; :func:`compact_answer` writes the
predictions as the compact layout when their JSON answer has an exact column form (every
value a float, or labels; the same probability classes and score names on every row, in
the same order), so :func:`clients.batch_answer.decode_answer` gives back the JSON answer
value for value. Anything else (None): the route answers JSON, which a client asking for
the compact answer must also read (the SDK does).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from clients.batch_answer import ANSWER_CONTENT_TYPE, ANSWER_VERSION, encode_answer
from learners import Prediction
from service.api.errors import InvalidInput
from service.api.routes._common import jsonable

_NEEDLE = ANSWER_CONTENT_TYPE.split("/", 1)[1]


def wants_compact(accept: str | None) -> bool:
    """Whether ``Accept`` lists the compact answer with q > 0. Other media types are not
    looked at (any other Accept gets JSON, as before); a malformed ``q`` or a ``version``
    other than this server's on the compact type is a 422 naming it."""
    if not accept or _NEEDLE not in accept.lower():
        return False
    for item in accept.split(","):
        media, *params = item.split(";")
        if media.strip().lower() != ANSWER_CONTENT_TYPE:
            continue
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            name, value = name.strip().lower(), value.strip().strip('"')
            if name == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = math.nan
                if not 0.0 <= q <= 1.0:  # NaN too
                    raise InvalidInput(
                        f"Accept: q={value!r} of {ANSWER_CONTENT_TYPE} is not in [0, 1]"
                    )
            elif name == "version" and value != str(ANSWER_VERSION):
                raise InvalidInput(
                    f"Accept: {ANSWER_CONTENT_TYPE} version {value!r} is not supported"
                    f" (this server writes version {ANSWER_VERSION})"
                )
        return q > 0.0
    return False


def _finite_or_nan(rows: Any) -> np.ndarray:
    """float64 with every non-finite value NaN: what the JSON answer writes as null."""
    arr = np.asarray(rows, dtype=np.float64)
    arr[~np.isfinite(arr)] = np.nan
    return arr


def values_answer(values: np.ndarray, batch: str, version: int) -> bytes:
    """The compact answer of a regressor's values alone (``LinearRegressor.predict_values``:
    the floats its ``Prediction``s would hold, no scores)."""
    return encode_answer(batch, version, _finite_or_nan(values))


def compact_answer(
    preds: Sequence[Prediction], probas: list[Any] | None, batch: str, version: int
) -> bytes | None:
    """The compact answer of ``preds`` (and a classifier's ``probas``), or None when the
    JSON answer has no exact column form."""
    if probas is None and all(p.scores is None and type(p.value) is float for p in preds):
        return encode_answer(batch, version, _finite_or_nan([p.value for p in preds]))
    kw: dict[str, Any] = {}
    values = [jsonable(p.value) for p in preds]
    if all(v is None or type(v) is float for v in values):
        column: Any = _finite_or_nan([math.nan if v is None else v for v in values])
    else:
        index: dict[tuple[type, str], int] = {}  # by type and repr: 1, 1.0 and True differ
        column = [index.setdefault((type(v), repr(v)), len(index)) for v in values]
        labels: list[Any] = [None] * len(index)
        for v, i in zip(values, column, strict=True):
            labels[i] = v  # the first row of each index set it, the others are equal
        kw["labels"] = labels
    if probas is not None:
        classes = [str(c) for c in probas[0]]
        if len(set(classes)) != len(classes):
            return None
        if any([str(c) for c in proba] != classes for proba in probas):
            return None
        kw["classes"] = classes
        kw["probabilities"] = _finite_or_nan([[float(q) for q in p.values()] for p in probas])
    scores = [jsonable(dict(p.scores)) if p.scores else None for p in preds]
    if any(s is not None for s in scores):
        names = list(scores[0] or ())
        if any(s is None or list(s) != names for s in scores):
            return None
        if not all(v is None or type(v) is float for s in scores for v in s.values()):  # type: ignore[union-attr]
            return None
        rows = [[math.nan if v is None else v for v in s.values()] for s in scores]  # type: ignore[union-attr]
        kw["score_names"], kw["scores"] = names, _finite_or_nan(rows)
    return encode_answer(batch, version, column, **kw)
