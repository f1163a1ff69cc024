"""Labels joined to an earlier prediction by ``prediction_id``; each prediction learns once.

The claim in Redis is pending until the broker acked the label's event, and a label that
finds a pending claim produces that claim's event again (the same id, so the workers keep
one copy): a label that never reached Kafka is never answered "duplicate" (docs/design.md,
"Labels").
"""

from __future__ import annotations

import json
import logging

from fastapi import APIRouter, HTTPException, status
from redis.exceptions import RedisError

from clients import wire
from service.api.deps import CacheDep, ModelDep, ProducerDep, SettingsDep, StoreDep
from service.api.idempotency import (
    IdempotencyKeyDep,
    check_reuse,
)
from service.api.routes._common import errors
from service.api.routes.events import check_label
from service.api.schemas import LabelRequest, LabelResponse
from service.api.security import IngestKey

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/models", tags=["labels"])


@router.post(
    "/{model_id}/labels",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=LabelResponse,
    dependencies=[IngestKey],
    responses=errors(401, 404, 413, 422, 503),
)
async def send_label(
    body: LabelRequest,
    model: ModelDep,
    settings: SettingsDep,
    store: StoreDep,
    producer: ProducerDep,
    cache: CacheDep,
    idempotency_key: IdempotencyKeyDep,
) -> LabelResponse:
    """Join a label to its prediction's features and produce the event (once per prediction)."""
    check_label(await cache.get(model), body.y, "y")
    if idempotency_key is not None:
        await check_reuse(
            store,
            model.id,
            idempotency_key,
            "labels",
            body.model_dump_json(),
            settings.idempotency_ttl_s,
        )
    event_id = wire.label_id(body.prediction_id)
    y_json = json.dumps(body.y)
    claim = await store.claim_prediction(model.id, body.prediction_id, y_json, idempotency_key)
    if claim is None:
        if await store.was_dropped(model.id, body.prediction_id):
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                detail=f"prediction {body.prediction_id!r} of model {model.id!r} was dropped:"
                f" the model keeps the requests holding its newest {settings.max_predictions}"
                " predicted rows for their labels (ONLINEPREDICT_MAX_PREDICTIONS)",
            )
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"no prediction {body.prediction_id!r} for model {model.id!r}"
            f" (unknown, or older than {settings.prediction_ttl_s} s)",
        )
    if claim.state == "done":
        # a retry of the request that was accepted (same key) gets its answer again
        replay = idempotency_key is not None and claim.key == idempotency_key
        return LabelResponse(status="accepted" if replay else "duplicate", event_id=event_id)
    # 'new', or 'pending': claimed by an earlier request whose produce may not have landed
    # (it failed, timed out, or its API died). Produce the claim's label (its y, whichever
    # request sends it); on failure the claim stays pending for the next try.
    record = wire.label(
        model.id,
        body.prediction_id,
        claim.x,
        json.loads(claim.y_json),
        ts=body.ts,
        hint=claim.hint,
        incarnation=model.incarnation_id,  # a label in flight across a re-create is not learned
    )
    await producer.send_all(settings.events_topic, model.id, [record], partition=model.home)
    try:
        await store.label_done(model.id, body.prediction_id)
    except RedisError:  # still pending: a later label re-produces it, deduped by its id
        logger.warning("label %s of model %s acked but not marked done", event_id, model.id)
    mine = claim.state == "new" or json.loads(claim.y_json) == body.y
    return LabelResponse(status="accepted" if mine else "duplicate", event_id=event_id)
