"""Models: create (spec validated by building the learner), list, get, delete; the events a
model refused (its dead letters)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response, status

import learners
from service.api.deps import CacheDep, ModelDep, ProducerDep, SettingsDep, StoreDep
from service.api.errors import InvalidInput
from service.api.redis_access import RedisAccess
from service.api.routes._common import errors
from service.api.schemas import (
    DeadLetter,
    DeadLetterList,
    ModelList,
    ModelOut,
    ModelSpec,
    ModelStatus,
    NewModelSpec,
)
from service.api.security import AdminKey, ReadKey, forbidden_model, principal_of
from service.api.serving import build_learner
from service.config import Settings
from service.metrics.running import RunningStats
from service.store import registry
from service.store.deadletters import LIST_KEEP, refusing

router = APIRouter(prefix="/v1/models", tags=["models"])


def _out(spec: ModelSpec, status_: dict[str, int | float | str | None] | None = None) -> ModelOut:
    cls = learners.REGISTRY.get(spec.kind)
    task = cls.task if cls is not None else "unknown"
    return ModelOut(
        **spec.model_dump(),
        task=task,
        partition=spec.home,
        incarnation=spec.incarnation_id,
        status=ModelStatus.model_validate(status_) if status_ else None,
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ModelOut,
    dependencies=[AdminKey],
    responses=errors(401, 409, 413, 422, 503),
)
async def create_model(
    spec: NewModelSpec,
    settings: SettingsDep,
    store: StoreDep,
    producer: ProducerDep,
    request: Request,
) -> ModelOut:
    """Create a model; the spec is checked by building its learner (422 with its message),
    after its declared state is checked against ``max_state_bytes`` (422 naming both).

    A new incarnation: the API first produces a ``created`` marker to the model's partition
    (503 while the broker is down), then stores the spec with the marker's position as its
    origin. The model learns only events after the marker, so re-creating a deleted id
    starts afresh (docs/reliability.md, "Re-creating a model")."""
    principal = principal_of(request)
    if not principal.reaches(spec.id):  # a tenant's key creates only under its prefix
        raise forbidden_model(principal, spec.id)
    if spec.dim > settings.max_dim:
        raise InvalidInput(f"dim {spec.dim} exceeds this server's limit of {settings.max_dim}")
    declared = check_state_budget(spec, settings)  # before building: it may not fit at all
    try:
        build_learner(spec)
    except ValueError as exc:  # the learner refuses the spec, in its own words
        raise InvalidInput(str(exc)) from None
    except TypeError as exc:  # e.g. a list where a number belongs: still the caller's input
        raise InvalidInput(f"{spec.kind}: {exc}") from None
    if await store.get_spec(spec.id) is not None:  # before producing a marker for nothing
        raise _exists(spec.id)
    await check_capacity(declared, settings, store)
    incarnation = uuid.uuid4().hex
    marker = registry.created_marker(spec.id, incarnation)
    [(partition, offset)] = await producer.send_all(settings.events_topic, spec.id, [marker])
    stored = registry.with_origin(spec.model_dump(mode="json"), incarnation, partition, offset)
    # a concurrent create of the same id may win here: its marker starts the lineage, ours
    # is ignored by the workers (it names another incarnation)
    if not await store.create_spec(stored, topic=settings.events_topic):
        raise _exists(spec.id)
    return _out(ModelSpec.from_stored(stored))


def _exists(model: str) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, detail=f"model {model!r} already exists")


def check_state_budget(spec: ModelSpec, settings: Settings) -> int:
    """The model's declared state in bytes, the learner's plus the running statistics'.
    ``InvalidInput`` (422) naming the formula and the figure when it exceeds
    ``max_state_bytes`` (one checkpoint: one Redis value); a bad spec raises, as
    ``InvalidInput``, the error building it would."""
    try:
        pre = spec.preprocess.model_dump() if spec.preprocess else None
        learner = learners.state_size(spec.kind, spec.dim, spec.params, pre)
    except ValueError as exc:  # an unknown kind or a bad spec: build's message
        raise InvalidInput(str(exc)) from None
    except TypeError as exc:
        raise InvalidInput(f"{spec.kind}: {exc}") from None
    stats = RunningStats.state_size(learners.REGISTRY[spec.kind].task, spec.dim)
    total = learner.bytes + stats.bytes
    if total > settings.max_state_bytes:
        raise InvalidInput(
            f"{spec.kind} with dim {spec.dim} needs {_size(total)} of state ({learner.formula}"
            f" for the learner + {stats.formula} of running statistics); this server's"
            f" budget is {_size(settings.max_state_bytes)} (ONLINEPREDICT_MAX_STATE_BYTES)"
        )
    return total


def _declared(spec: ModelSpec) -> int:
    """An existing model's declared state (0 when its kind is no longer installed)."""
    try:
        pre = spec.preprocess.model_dump() if spec.preprocess else None
        learner = learners.state_size(spec.kind, spec.dim, spec.params, pre)
        stats = RunningStats.state_size(learners.REGISTRY[spec.kind].task, spec.dim)
    except (ValueError, TypeError, KeyError):
        return 0
    return learner.bytes + stats.bytes


async def check_capacity(declared: int, settings: Settings, store: RedisAccess) -> None:
    """``InvalidInput`` (422) when one more model would pass ``max_models``, or when the
    state of every model with this one, each counted ``1 + history_keep`` times (the
    checkpoint and the history kept for rollback), would pass ``max_total_state_bytes``.

    Counted from the stored specs, not reserved: two creates at the same moment may both
    pass the last free place (each is at most one model over; the ``admin`` rate limit
    bounds how many can race). docs/security.md, "Limits"."""
    if not settings.max_models and not settings.max_total_state_bytes:
        return
    specs = [ModelSpec.from_stored(s) for s in await store.list_specs()]
    if settings.max_models and len(specs) >= settings.max_models:
        raise InvalidInput(
            f"this server holds {len(specs)} models, its limit (ONLINEPREDICT_MAX_MODELS is"
            f" {settings.max_models}): delete one before creating another"
        )
    if settings.max_total_state_bytes:
        copies = 1 + settings.history_keep
        held = sum(_declared(s) for s in specs) * copies
        total = held + declared * copies
        if total > settings.max_total_state_bytes:
            raise InvalidInput(
                f"this model's state, {_size(declared)} x {copies} (the checkpoint and"
                f" {settings.history_keep} kept for rollback, ONLINEPREDICT_HISTORY_KEEP),"
                f" with the {len(specs)} models' {_size(held)} would make {_size(total)}, over"
                f" this server's total of {_size(settings.max_total_state_bytes)}"
                " (ONLINEPREDICT_MAX_TOTAL_STATE_BYTES)"
            )


def _size(n: int) -> str:
    """A byte count in binary units, e.g. 268435456 -> "256.0 MiB"."""
    value, unit = float(n), "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


@router.get("", response_model=ModelList, dependencies=[ReadKey], responses=errors(401, 503))
async def list_models(store: StoreDep, request: Request) -> ModelList:
    """Every model the key reaches (all, or those under its prefix), each with its
    checkpoint version, event counters, last update and refused share."""
    principal = principal_of(request)
    specs = [ModelSpec.from_stored(s) for s in await store.list_specs()]
    specs = [s for s in specs if principal.reaches(s.id)]
    ids = [s.id for s in specs]
    statuses = await store.statuses(ids)
    shares = await store.refused_shares(ids)
    return ModelList(models=[_out(s, _refusals(statuses[s.id], shares.get(s.id))) for s in specs])


@router.get(
    "/{model_id}", response_model=ModelOut, dependencies=[ReadKey], responses=errors(401, 404, 503)
)
async def get_model(model: ModelDep, store: StoreDep) -> ModelOut:
    """One model, with its checkpoint version, event counters, last update and whether it
    refuses most of its recent events (``refusing``, ``refused_share``)."""
    status_ = await store.status(model.id)
    share = (await store.refused_shares([model.id])).get(model.id)
    return _out(model, _refusals(status_, share))


def _refusals(
    status_: dict[str, int | float | str | None], share: tuple[int, int] | None
) -> dict[str, int | float | str | None]:
    """The status with the model's recent refused share (service/store/deadletters.py)."""
    if share is None or not share[0]:
        return status_
    return {**status_, "refused_share": share[1] / share[0], "refusing": refusing(*share)}


@router.delete(
    "/{model_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[AdminKey],
    responses=errors(401, 404, 503),
)
async def delete_model(
    model: ModelDep, settings: SettingsDep, store: StoreDep, cache: CacheDep
) -> Response:
    """Delete a model: spec, checkpoint, history and pending predictions."""
    await store.delete_model(model.id, topic=settings.events_topic)
    cache.forget(model.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get(
    "/{model_id}/deadletters",
    response_model=DeadLetterList,
    dependencies=[ReadKey],
    responses=errors(401, 404, 422, 503),
)
async def model_deadletters(
    model: ModelDep,
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=LIST_KEEP, description="At most this many.")] = 100,
) -> DeadLetterList:
    """The events the model refused, newest first, each with its reason, event id, topic
    position and time (the last 1,000 its workers listed; docs/design.md, "Dead letters")."""
    letters = await store.model_deadletters(model.id, limit)
    return DeadLetterList(model=model.id, deadletters=[DeadLetter(**d) for d in letters])
