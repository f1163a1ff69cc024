"""Checkpoints: list a model's kept versions and roll back to one (docs/checkpoints.md).

The API never writes a model's state (the worker owning its partition is the single
writer): a rollback is a ``rollback`` control event on the events topic, keyed by the model
id, which the worker applies in log order (docs/events.md §4).
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, HTTPException, status

from clients import wire
from service.api.deps import ModelDep, ProducerDep, SettingsDep, StoreDep
from service.api.errors import NotSupported
from service.api.routes._common import errors
from service.api.schemas import (
    CheckpointList,
    CheckpointOut,
    RollbackAccepted,
    RollbackOut,
    RollbackRequest,
)
from service.api.security import AdminKey, ReadKey
from service.store.checkpoints import read_history, read_rollbacks

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get(
    "/{model_id}/checkpoints",
    response_model=CheckpointList,
    dependencies=[ReadKey],
    responses=errors(401, 404, 503),
)
async def list_checkpoints(model: ModelDep, store: StoreDep) -> CheckpointList:
    """The model's last K checkpoints (K = ``ONLINEPREDICT_HISTORY_KEEP``), newest first."""
    history = await read_history(store.redis, store.keys, model.id)
    done = await read_rollbacks(store.redis, store.keys, model.id)
    return CheckpointList(
        rollbacks=[
            RollbackOut(
                event_id=r.event_id,
                version=r.version,
                partition=r.partition,
                offset=r.offset,
                discard_after=r.discard_after,
                discarded_from=r.after + 1 if r.discard_after else None,
                discarded_to=r.offset - 1 if r.discard_after else None,
                discarded=r.discarded,
                skip_ids=list(r.skip_ids),
            )
            for r in done
        ],
        checkpoints=[
            CheckpointOut(
                version=h.version,
                partition=h.stamp.partition,
                offset=h.stamp.offset,
                event_id=h.stamp.event_id,
                ts=h.ts,
                applied=h.counters.applied if h.counters is not None else None,
            )
            for h in history
        ],
    )


@router.post(
    "/{model_id}/rollback",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=RollbackAccepted,
    dependencies=[AdminKey],
    responses=errors(401, 404, 409, 413, 422, 503),
)
async def rollback(
    body: RollbackRequest,
    model: ModelDep,
    settings: SettingsDep,
    store: StoreDep,
    producer: ProducerDep,
) -> RollbackAccepted:
    """Restore a kept checkpoint and its offset: the worker re-learns from there.

    Produces a ``rollback`` control event; the owning worker applies it in log order,
    installs the version's state, metrics and counters and re-learns every event after the
    version's stamp exactly once. With ``discard_after``, it re-learns none of them: they
    are discarded (the model's ``status.discarded`` counts the ones it had learned; the
    checkpoint listing shows the offsets). ``skip_ids``: event ids never to learn, in the
    re-learn or later. ``202``: accepted, not yet applied. 404 when the version is not (or
    no longer) kept; 409 when it predates rollback support (docs/checkpoints.md)."""
    history = await read_history(store.redis, store.keys, model.id)
    entry = next((h for h in history if h.version == body.version), None)
    if entry is None:
        kept = ", ".join(str(h.version) for h in history) or "none"
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            detail=f"model {model.id!r} has no kept checkpoint version {body.version}"
            f" (kept: {kept})",
        )
    if entry.counters is None:
        raise NotSupported(
            f"model {model.id!r}: checkpoint version {body.version} predates rollback support"
        )
    event_id = uuid.uuid4().hex
    stamp = (entry.stamp.partition, entry.stamp.offset, entry.stamp.event_id)
    record = wire.rollback(
        model.id,
        event_id,
        body.version,
        incarnation=model.incarnation_id,
        discard_after=body.discard_after,
        skip_ids=body.skip_ids,
        stamp=stamp,
    )
    await producer.send_all(settings.events_topic, model.id, [record], partition=model.home)
    return RollbackAccepted(
        event_id=event_id,
        version=body.version,
        discard_after=body.discard_after,
        skip_ids=body.skip_ids,
    )
