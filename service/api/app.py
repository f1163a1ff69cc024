"""The FastAPI application: ``create_app(settings)`` with a lifespan that owns the Redis pool
and the Kafka producer (closed in reverse order through an ``AsyncExitStack``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypedDict

from fastapi import FastAPI
from fastapi.routing import APIRoute

from service.api import errors
from service.api.broker import LazyProducer
from service.api.http import raise_fd_limit, uvicorn_options
from service.api.metrics_listener import MetricsListener
from service.api.middleware import LimitsAndTiming
from service.api.prometheus import ApiMetrics
from service.api.ratelimit import RateLimiter
from service.api.redis_access import RedisAccess
from service.api.redis_pipe import RedisPipe
from service.api.routes import (
    capabilities,
    checkpoints,
    events,
    figures,
    health,
    labels,
    models,
    predict,
    series,
)
from service.api.routes._common import errors as route_errors
from service.api.security import KeyConfigError, KeyRing, StartupRefused, startup_check
from service.api.series import SeriesSampler
from service.api.serving import ModelCache, SpecMemo
from service.config import Settings, get_settings
from service.dashboard.router import router as dashboard_router
from service.docs_ui.router import router as docs_router
from service.gc_tuning import freeze_startup_objects
from service.store.connect import redis_client
from service.store.keys import Keys

logger = logging.getLogger(__name__)

REDIS_CONNECT_TIMEOUT_S = 2.0
REDIS_SOCKET_TIMEOUT_S = 5.0

DESCRIPTION = """
Online prediction service: create models from any registered learner kind, send events
(labelled or unlabelled vectors) through Kafka to the learner workers, get predictions
from the latest checkpoint and join delayed labels to them.

Errors are `{"detail": "<readable message>"}`: 422 bad input, 404 unknown model or
prediction, 401 missing/wrong API key (`X-API-Key`, once any key is configured), 403 key
without the route's scope (named) or outside its model-id prefix, 409 id taken or
capability missing, 413 body too large, 503 Redis or Kafka down.
"""


class LifespanState(TypedDict):
    store: RedisAccess
    producer: LazyProducer
    cache: ModelCache
    specs: SpecMemo


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _unique_id(route: APIRoute) -> str:
    """Clean SDK method names: ``<tag>-<handler>``, e.g. ``models-create_model``."""
    return f"{route.tags[0]}-{route.name}" if route.tags else route.name


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    keyring = KeyRing(settings)  # a malformed key list: KeyConfigError, no secret in it
    # from here on the app holds the keys' SHA-256 only (docs/security.md)
    settings = settings.model_copy(update={"api_key": None, "api_keys": None})
    limiter = RateLimiter(settings)  # shared counts in Redis; no connection made here
    if settings.api_key_on_reads is not None:
        logger.warning(
            "ONLINEPREDICT_API_KEY_ON_READS is deprecated and ignored: once a key is set,"
            " every /v1 route needs one, reads included (docs/security.md)"
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[LifespanState]:
        async with AsyncExitStack() as stack:
            # No connection is made here: the API starts (and answers 503) with Redis down.
            redis = redis_client(
                settings,
                socket_connect_timeout=REDIS_CONNECT_TIMEOUT_S,
                socket_timeout=REDIS_SOCKET_TIMEOUT_S,
                health_check_interval=30,
            )
            stack.push_async_callback(redis.aclose)
            stack.push_async_callback(limiter.aclose)
            producer = LazyProducer(settings)
            stack.push_async_callback(producer.close)
            pipe = None
            # on a cluster the predict path uses the cluster client: the pipe speaks to one
            # node and follows no slot map (docs/design.md, "Redis Cluster")
            if settings.redis_mode == "standalone" and RedisPipe.supports(settings.redis_url):
                pipe = RedisPipe(
                    settings.redis_url,
                    socket_timeout=REDIS_SOCKET_TIMEOUT_S,
                    connect_timeout=REDIS_CONNECT_TIMEOUT_S,
                )
                stack.callback(pipe.close)
            store = RedisAccess(
                redis, Keys(settings.key_prefix), pipe, max_predictions=settings.max_predictions
            )
            if settings.series_interval_s > 0:
                sampler = SeriesSampler(
                    redis,
                    store.keys,
                    interval_s=settings.series_interval_s,
                    capacity=settings.series_points,
                )
                task = asyncio.create_task(sampler.run(), name="series-sampler")
                stack.push_async_callback(_cancel, task)
            if settings.metrics_port:
                listener = MetricsListener(
                    lambda: app.state.metrics.render(store),
                    settings.metrics_host,
                    settings.metrics_port,
                )
                if await listener.start():
                    stack.push_async_callback(listener.stop)
            freeze_startup_objects()
            yield {
                "store": store,
                "producer": producer,
                "cache": ModelCache(store),
                "specs": SpecMemo(),
            }

    app = FastAPI(
        title="onlinepredict",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        generate_unique_id_function=_unique_id,
        # served by service/docs_ui from local assets (FastAPI's own pages use a CDN)
        docs_url=None,
        redoc_url=None,
        # Every validation error has our readable shape, not FastAPI's HTTPValidationError.
        responses=route_errors(422),
        openapi_tags=[
            {"name": "models", "description": "Create, list, inspect and delete models."},
            {"name": "predict", "description": "Predictions from the latest checkpoint."},
            {"name": "events", "description": "Stream examples to the learners via Kafka."},
            {"name": "labels", "description": "Delayed labels joined to a prediction."},
            {"name": "tasks", "description": "Quantify, portfolio, transductive blocks."},
            {"name": "health", "description": "Liveness, readiness, Prometheus metrics."},
        ],
    )
    app.state.settings = settings
    app.state.keyring = keyring
    app.state.metrics = ApiMetrics()
    errors.install(app)
    routers = (predict, models, checkpoints, series, figures, events, labels, capabilities, health)
    limited = route_errors(429)  # every /v1 route may be rate limited (middleware.py)
    for module in routers:
        app.include_router(module.router, responses=None if module is health else limited)
    app.include_router(dashboard_router)
    app.include_router(docs_router)
    app.add_middleware(
        LimitsAndTiming,
        max_body_bytes=settings.max_body_bytes,
        latency=app.state.metrics.latency,
        max_concurrency=settings.max_concurrency,
        body_timeout_s=settings.body_timeout_s,
        limiter=limiter,
    )
    return app


def serve(settings: Settings | None = None, **uvicorn_options_given: Any) -> None:
    """Run the API with uvicorn on ``settings.api_host:api_port`` (``onlinepredict api``)."""
    import uvicorn

    settings = settings or get_settings()
    try:
        app = create_app(settings)
        startup_check(settings, app.state.keyring)
    except (KeyConfigError, StartupRefused) as exc:
        # one line, no traceback, no secret: the process exits 1
        raise SystemExit(f"onlinepredict api: refusing to start: {exc}") from None
    ring: KeyRing = app.state.keyring
    if ring.path is not None:  # rotation without a restart (docs/security.md)
        signal.signal(signal.SIGHUP, lambda *_: ring.reload())
    fds = raise_fd_limit()  # slow clients must not starve new connections of descriptors
    if fds is not None and fds[0] != fds[1]:
        logger.info("open-files limit raised from %d to %d", *fds)
    # quiet unless verbose: no access line per request, no uvicorn lifecycle lines (its
    # warnings and errors still show); the one line that matters is logged below
    quiet = {} if settings.log_verbose else {"log_level": "warning"}
    options = {"access_log": settings.log_verbose, **quiet, **uvicorn_options(settings)}
    config = uvicorn.Config(
        app, host=settings.api_host, port=settings.api_port, **{**options, **uvicorn_options_given}
    )
    # Bind before the lifespan starts anything: uvicorn binds after it, and on a taken port
    # its lifespan shutdown hung for minutes ignoring SIGTERM (issue 34). Exit 1 at once.
    try:
        sock = config.bind_socket()
    except SystemExit:
        raise SystemExit(
            f"onlinepredict api: cannot listen on {settings.api_host}:{settings.api_port}"
            " (address already in use?): set ONLINEPREDICT_API_PORT or stop what listens there"
        ) from None
    logger.info("API listening on http://%s:%d", settings.api_host, sock.getsockname()[1])
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    if not server.started:
        raise SystemExit(1)
