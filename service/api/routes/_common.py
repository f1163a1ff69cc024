"""Helpers shared by the routes: documented error responses, input checks, JSON values."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from clients import wire
from service.api.errors import InvalidInput
from service.api.schemas import ErrorResponse, ModelSpec
from service.config import Settings


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error codes."""
    text = {
        401: "Missing or wrong API key.",
        403: "The API key lacks the route's scope, or this model id is outside its prefix.",
        404: "No model with this id (or, for labels, no such prediction).",
        409: "Conflict: the id exists, or the model's learner lacks this capability.",
        413: "Request body too large, or its estimated cost over the server's budget.",
        422: "Invalid input: wrong dimension, NaN/inf, bad parameter (readable message).",
        429: "Over the rate limit of the key (or address) for this route's scope; retry"
        " after Retry-After seconds.",
        503: "Redis or Kafka unavailable, or the server busy; retry later (Retry-After).",
    }
    if 401 in codes:  # wherever a key is checked, a valid one may lack the scope
        codes = (*codes, 403)
    return {c: {"model": ErrorResponse, "description": text[c]} for c in codes}


def check_vectors(
    spec: ModelSpec, rows: Sequence[Sequence[float]], settings: Settings, what: str
) -> None:
    """Batch size and dimension limits; ``InvalidInput`` (422) with a readable message."""
    if len(rows) > settings.max_batch:
        raise InvalidInput(f"{what}: at most {settings.max_batch} per request, got {len(rows)}")
    for i, row in enumerate(rows):
        if len(row) != spec.dim:
            raise InvalidInput(
                f"{what}[{i}] must have dimension {spec.dim} (model {spec.id!r}), got {len(row)}"
            )


def dense_rows(
    spec: ModelSpec, rows: Sequence[Sequence[float] | Mapping[str, float]], what: str
) -> list[Sequence[float]]:
    """``rows`` in list form: an object ``x`` mapped by the model's ``features`` (missing
    names are 0); ``InvalidInput`` (422) naming unknown names, or when the model has none."""
    if all(type(r) is list for r in rows):
        return rows  # type: ignore[return-value]
    index = wire.feature_index(spec.features) if spec.features is not None else None
    out: list[Sequence[float]] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            out.append(row)
            continue
        where = what if what == "x" else f"{what}[{i}]"
        if index is None:
            raise InvalidInput(f"{where}: {wire.no_features(spec.dim)} (model {spec.id!r})")
        try:
            out.append(wire.dense(row, index))
        except ValueError as exc:
            raise InvalidInput(f"{where}: {exc} (model {spec.id!r})") from None
    return out


def jsonable(value: Any) -> Any:
    """numpy scalars and arrays (also nested in lists and dicts) as plain JSON values;
    non-finite floats become null (JSON has no NaN)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return value
