"""Labels joined to an earlier prediction by ``prediction_id``; each prediction learns once."""

from __future__ import annotations

import contextlib

from fastapi import APIRouter, HTTPException, status

from service.api.deps import CacheDep, ModelDep, ProducerDep, SettingsDep, StoreDep
from service.api.routes._common import errors
from service.api.routes.events import check_label, event_record
from service.api.schemas import LabelRequest, LabelResponse
from service.api.security import WriteKey

router = APIRouter(prefix="/v1/models", tags=["labels"])


def label_event_id(prediction_id: str) -> str:
    """Deterministic, so a label produced twice (retry after a lost ack) is deduped."""
    return f"label:{prediction_id}"


@router.post(
    "/{model_id}/labels",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=LabelResponse,
    dependencies=[WriteKey],
    responses=errors(401, 404, 413, 422, 503),
)
async def send_label(
    body: LabelRequest,
    model: ModelDep,
    settings: SettingsDep,
    store: StoreDep,
    producer: ProducerDep,
    cache: CacheDep,
) -> LabelResponse:
    """Join a label to its prediction's features and produce the event (once per prediction)."""
    check_label(await cache.get(model), body.y, "y")
    event_id = label_event_id(body.prediction_id)
    claim = await store.claim_prediction(model.id, body.prediction_id)
    if claim is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"no prediction {body.prediction_id!r} for model {model.id!r}"
            f" (unknown, or older than {settings.prediction_ttl_s} s)",
        )
    if claim.duplicate:
        return LabelResponse(status="duplicate", event_id=event_id)
    assert claim.x is not None
    record = event_record(model.id, event_id, claim.x, body.y, claim.hint, body.ts)
    record["prediction_id"] = body.prediction_id
    try:
        await producer.send_all(settings.events_topic, model.id, [record], partition=model.home)
    except BaseException:
        # Unclaim so the caller can retry; the fixed event id dedupes a send that did land.
        with contextlib.suppress(Exception):
            await store.release_prediction(model.id, body.prediction_id)
        raise
    return LabelResponse(status="accepted", event_id=event_id)
