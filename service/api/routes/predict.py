"""Predictions from the latest checkpoint; each is stored (x, hint) for a later label.

This is the API's hot path, kept lean after profiling (``benchmarks/predict.py``,
``benchmarks/README.md``):

* one sync dependency only (``CacheDep``, which tests override): FastAPI runs a sync
  dependency in the thread pool, one thread hop per dependency per request, and these hops
  dominated the latency on a loaded machine; settings and store come from the request;
* two Redis round trips: the spec with the checkpoint version (``ApiStore.raw_spec``; the
  cache's version check then needs none), and the batch of predictions stored with one
  command instead of two per row; the spec is parsed once per distinct stored spec;
* the response is serialised once with ``json.dumps`` (``PredictResponse`` still documents
  it in the OpenAPI schema) instead of being validated again as a pydantic model.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from fastapi import APIRouter, HTTPException, Request, Response, status
from starlette.concurrency import run_in_threadpool

from service.api.deps import CacheDep, ModelIdPath
from service.api.routes._common import check_vectors, errors, jsonable
from service.api.schemas import PredictRequest, PredictResponse
from service.api.security import ReadKey
from service.api.serving import parse_spec
from service.api.store import ApiStore
from service.config import Settings

router = APIRouter(prefix="/v1/models", tags=["predict"])

THREAD_BATCH = 256  # larger batches run off the event loop


def prediction_ids(n: int) -> list[str]:
    """n random 128-bit ids as 32 hex digits (like uuid4().hex), from one urandom call."""
    raw = os.urandom(16 * n).hex()
    return [raw[32 * i : 32 * (i + 1)] for i in range(n)]


@router.post(
    "/{model_id}/predict",
    response_model=PredictResponse,
    dependencies=[ReadKey],
    responses=errors(401, 404, 413, 422, 503),
)
async def predict(
    model_id: ModelIdPath, body: PredictRequest, request: Request, cache: CacheDep
) -> Response:
    """Predict for one vector (`x`) or a batch (`instances`) with the serving version."""
    settings: Settings = request.app.state.settings
    store: ApiStore = request.state.store
    raw_spec = await store.raw_spec(model_id)
    if raw_spec is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no model with id {model_id!r}")
    model = parse_spec(raw_spec)
    rows, hints = body.rows()
    check_vectors(model, rows, settings, "x" if body.x is not None else "instances")
    served = await cache.get(model)
    learner = served.learner

    def run() -> list:  # type: ignore[type-arg]
        # predict() changes no state (learner contract), so sharing the cached learner is safe.
        # One conversion of the whole batch: each row is then an ndarray view, cheap to check.
        X = np.asarray(rows, dtype=np.float64)
        return [learner.predict(x, hint=h) for x, h in zip(X, hints, strict=True)]

    preds = run() if len(rows) < THREAD_BATCH else await run_in_threadpool(run)
    ids = prediction_ids(len(rows))
    await store.save_predictions(
        model.id,
        list(zip(ids, rows, hints, strict=True)),
        served.version,
        settings.prediction_ttl_s,
    )
    out: list[dict[str, Any]] = [
        {
            "value": jsonable(p.value),
            "prediction_id": pid,
            "scores": jsonable(dict(p.scores)) if p.scores else None,
        }
        for p, pid in zip(preds, ids, strict=True)
    ]
    payload = {"predictions": out, "model_version": served.version}
    return Response(json.dumps(payload, separators=(",", ":")), media_type="application/json")
