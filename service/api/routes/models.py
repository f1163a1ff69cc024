"""Models: create (spec validated by building the learner), list, get, delete."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response, status

import learners
from service.api.deps import CacheDep, ModelDep, SettingsDep, StoreDep
from service.api.routes._common import errors
from service.api.schemas import ModelList, ModelOut, ModelSpec, ModelStatus
from service.api.security import ReadKey, WriteKey
from service.api.serving import build_learner

router = APIRouter(prefix="/v1/models", tags=["models"])


def _out(spec: ModelSpec, status_: dict[str, int] | None = None) -> ModelOut:
    cls = learners.REGISTRY.get(spec.kind)
    task = cls.task if cls is not None else "unknown"
    return ModelOut(
        **spec.model_dump(), task=task, status=ModelStatus(**status_) if status_ else None
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ModelOut,
    dependencies=[WriteKey],
    responses=errors(401, 409, 413, 422, 503),
)
async def create_model(spec: ModelSpec, settings: SettingsDep, store: StoreDep) -> ModelOut:
    """Create a model; the spec is checked by building its learner (422 with its message)."""
    if spec.dim > settings.max_dim:
        raise ValueError(f"dim {spec.dim} exceeds this server's limit of {settings.max_dim}")
    try:
        build_learner(spec)
    except TypeError as exc:  # e.g. a list where a number belongs: still the caller's input
        raise ValueError(f"{spec.kind}: {exc}") from None
    if not await store.create_spec(spec.model_dump(mode="json")):
        raise HTTPException(status.HTTP_409_CONFLICT, detail=f"model {spec.id!r} already exists")
    return _out(spec)


@router.get("", response_model=ModelList, dependencies=[ReadKey], responses=errors(401, 503))
async def list_models(store: StoreDep) -> ModelList:
    """List every model."""
    return ModelList(models=[_out(ModelSpec.from_stored(s)) for s in await store.list_specs()])


@router.get(
    "/{model_id}", response_model=ModelOut, dependencies=[ReadKey], responses=errors(401, 404, 503)
)
async def get_model(model: ModelDep, store: StoreDep) -> ModelOut:
    """One model, with its checkpoint version and event counters."""
    return _out(model, await store.status(model.id))


@router.delete(
    "/{model_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriteKey],
    responses=errors(401, 404, 503),
)
async def delete_model(model: ModelDep, store: StoreDep, cache: CacheDep) -> Response:
    """Delete a model: spec, checkpoint, history and pending predictions."""
    await store.delete_model(model.id)
    cache.forget(model.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
