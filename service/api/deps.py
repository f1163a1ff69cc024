"""Dependencies: route signatures read ``settings: SettingsDep, model: ModelDep``.

All are coroutines although none awaits: FastAPI runs a plain ``def`` dependency in the
thread pool, one thread hop per dependency per request."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Path, Request, status

from service.api.broker import LazyProducer
from service.api.redis_access import RedisAccess
from service.api.schemas import ModelSpec
from service.api.serving import ModelCache
from service.config import Settings
from service.store.connect import RedisClient


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings  # type: ignore[no-any-return]


async def get_store(request: Request) -> RedisAccess:
    return request.state.store  # type: ignore[no-any-return]


async def get_redis(request: Request) -> RedisClient:
    """The app's Redis pool (bytes mode); prefer ``StoreDep`` for the API's own keys."""
    return request.state.store.redis  # type: ignore[no-any-return]


async def get_producer(request: Request) -> LazyProducer:
    return request.state.producer  # type: ignore[no-any-return]


async def get_cache(request: Request) -> ModelCache:
    return request.state.cache  # type: ignore[no-any-return]


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[RedisAccess, Depends(get_store)]
RedisDep = Annotated[RedisClient, Depends(get_redis)]
ProducerDep = Annotated[LazyProducer, Depends(get_producer)]
CacheDep = Annotated[ModelCache, Depends(get_cache)]

ModelIdPath = Annotated[str, Path(description="The model id.", examples=["sp500"])]


async def get_model(model_id: ModelIdPath, store: StoreDep) -> ModelSpec:
    """The model's spec; 404 when no model has this id."""
    raw = await store.get_spec(model_id)
    if raw is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no model with id {model_id!r}")
    return ModelSpec.from_stored(raw)


ModelDep = Annotated[ModelSpec, Depends(get_model)]
