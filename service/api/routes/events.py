"""Events: a batch of labelled or unlabelled vectors, produced to Kafka keyed by model id."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, status

from clients import wire
from service.api.cost import check_cost
from service.api.deps import CacheDep, ModelDep, ProducerDep, SettingsDep, StoreDep
from service.api.errors import InvalidInput
from service.api.idempotency import (
    IdempotencyKeyDep,
    check_reuse,
    derived_event_id,
)
from service.api.routes._common import check_vectors, dense_rows, errors
from service.api.schemas import Accepted, EventsRequest
from service.api.security import IngestKey
from service.api.serving import Served

router = APIRouter(prefix="/v1/models", tags=["events"])


def check_label(served: Served, y: Any, where: str) -> None:
    """The learner's own label check (e.g. -1/+1 for classifiers), before Kafka: its
    ``ValueError`` is the client's bad label, ``InvalidInput`` (422)."""
    try:
        served.learner._check_y(y)  # noqa: SLF001 - the contract's label validation
    except ValueError as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def assign_id(model: str, idempotency_key: str | None, index: int) -> str:
    """The id of an event sent without one: derived from the Idempotency-Key when the
    request has one (the same on a retry), else random (a retry is another event)."""
    if idempotency_key is None:
        return uuid.uuid4().hex
    return derived_event_id(model, idempotency_key, index)


@router.post(
    "/{model_id}/events",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=Accepted,
    dependencies=[IngestKey],
    responses=errors(401, 404, 413, 422, 503),
)
async def send_events(
    body: EventsRequest,
    model: ModelDep,
    settings: SettingsDep,
    producer: ProducerDep,
    cache: CacheDep,
    store: StoreDep,
    idempotency_key: IdempotencyKeyDep,
) -> Accepted:
    """Validate a batch of events and produce them to Kafka (202 once all are acked)."""
    # an object x is produced in list form: the worker's hot path stays the list's
    xs = dense_rows(model, [e.x for e in body.events], "events")
    check_vectors(model, xs, settings, "events")
    check_cost(model, len(xs), settings.max_request_cost, "events")
    served = await cache.get(model)
    for i, e in enumerate(body.events):
        if e.y is not None:
            check_label(served, e.y, f"events[{i}].y")
    if idempotency_key is not None:
        await check_reuse(
            store,
            model.id,
            idempotency_key,
            "events",
            body.model_dump_json(),
            settings.idempotency_ttl_s,
        )
    records = [
        wire.example(
            model.id,
            e.id or assign_id(model.id, idempotency_key, i),
            xs[i],
            e.y,
            ts=e.ts,
            hint=e.hint,
            incarnation=model.incarnation_id,
        )
        for i, e in enumerate(body.events)
    ]
    frame = as_frame(model.id, body, records) if settings.events_wire_format == "frame" else None
    if frame is not None:
        await producer.send_values(settings.events_topic, model.id, [frame], partition=model.home)
    else:
        await producer.send_all(settings.events_topic, model.id, records, partition=model.home)
    return Accepted(accepted=len(records), ids=[r["id"] for r in records])


def as_frame(model: str, body: EventsRequest, records: list[dict[str, Any]]) -> bytes | None:
    """The batch as one frame (docs/events.md §6), or None when a frame cannot carry it
    as the JSON records would: several event times, or booleans mixed with numbers. The
    vectors are the records' (named ones already mapped to lists)."""
    times = {e.ts for e in body.events}
    if len(times) != 1:
        return None
    labels = [r[wire.Y] for r in records]
    given = [y for y in labels if y is not None]
    if any(isinstance(y, bool) for y in given) and not all(isinstance(y, bool) for y in given):
        return None
    hints = [e.hint for e in body.events]
    return wire.encode_frame(
        model,
        [r[wire.ID] for r in records],
        [r[wire.X] for r in records],
        labels,
        hints if any(h is not None for h in hints) else None,
        ts=times.pop(),
        incarnation=records[0].get(wire.INCARNATION),
    )
