"""Liveness, readiness (Redis and Kafka reachable) and Prometheus metrics."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from service.api.broker import LazyProducer
from service.api.deps import ProducerDep, RedisDep, SettingsDep, StoreDep
from service.api.routes._common import errors
from service.api.schemas import Health, Readiness
from service.api.security import authorize, forbidden_all_models
from service.store.connect import RedisClient

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

PING_TIMEOUT_S = 3.0


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Liveness: the process answers."""
    return Health()


@router.get(
    "/readyz",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "Redis or Kafka unreachable."}},
)
async def readyz(redis: RedisDep, producer: ProducerDep, settings: SettingsDep) -> JSONResponse:
    """Readiness: Redis answers PING, the broker answers and the events topic exists. The
    body says ready or not, nothing more (it is open): what failed goes to the log."""
    redis_state, kafka_state = await asyncio.gather(
        _redis(redis), _kafka(producer, settings.events_topic)
    )
    ready = redis_state == "ok" and kafka_state == "ok"
    if not ready:
        logger.warning("/readyz: not ready: redis %s; kafka %s", redis_state, kafka_state)
    body = Readiness(status="ready" if ready else "unavailable")
    code = status.HTTP_200_OK if ready else status.HTTP_503_SERVICE_UNAVAILABLE
    return JSONResponse(body.model_dump(), status_code=code)


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}, **errors(401)},
)
async def metrics(request: Request, store: StoreDep) -> Response:
    """Prometheus exposition: per-model event counters, dead letters, request latency.
    Every model's id and figures: with keys configured it needs the ``read`` scope and a
    key without a model prefix. The metrics listener (``ONLINEPREDICT_METRICS_PORT``,
    loopback by default) serves the same text without a key, for Prometheus."""
    principal = authorize(request, "read")
    if principal.prefix is not None:
        raise forbidden_all_models(principal.name)
    body = await request.app.state.metrics.render(store)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


async def _redis(redis: RedisClient) -> str:
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            await redis.ping()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"unavailable: {type(exc).__name__}: {exc}"
    return "ok"


async def _kafka(producer: LazyProducer, topic: str) -> str:
    try:
        await producer.ping(topic)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"unavailable: {exc}"
    return "ok"
