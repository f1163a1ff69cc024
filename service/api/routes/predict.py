"""Predictions from the latest checkpoint; each is stored (x, hint) for a later label."""

from __future__ import annotations

import uuid

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from service.api.deps import CacheDep, ModelDep, SettingsDep, StoreDep
from service.api.routes._common import check_vectors, errors, jsonable
from service.api.schemas import PredictionOut, PredictRequest, PredictResponse
from service.api.security import ReadKey

router = APIRouter(prefix="/v1/models", tags=["predict"])

THREAD_BATCH = 256  # larger batches run off the event loop


@router.post(
    "/{model_id}/predict",
    response_model=PredictResponse,
    dependencies=[ReadKey],
    responses=errors(401, 404, 413, 422, 503),
)
async def predict(
    body: PredictRequest, model: ModelDep, settings: SettingsDep, store: StoreDep, cache: CacheDep
) -> PredictResponse:
    """Predict for one vector (`x`) or a batch (`instances`) with the serving version."""
    rows, hints = body.rows()
    check_vectors(model, rows, settings, "x" if body.x is not None else "instances")
    served = await cache.get(model)
    learner = served.learner

    def run() -> list:  # type: ignore[type-arg]
        # predict() changes no state (learner contract), so sharing the cached learner is safe.
        return [learner.predict(x, hint=h) for x, h in zip(rows, hints, strict=True)]

    preds = run() if len(rows) < THREAD_BATCH else await run_in_threadpool(run)
    ids = [uuid.uuid4().hex for _ in rows]
    await store.save_predictions(
        model.id,
        list(zip(ids, rows, hints, strict=True)),
        served.version,
        settings.prediction_ttl_s,
    )
    out = [
        PredictionOut(
            value=jsonable(p.value),
            prediction_id=pid,
            scores=jsonable(dict(p.scores)) if p.scores else None,
        )
        for p, pid in zip(preds, ids, strict=True)
    ]
    return PredictResponse(predictions=out, model_version=served.version)
