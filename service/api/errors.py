"""Exception handlers: docs/design.md's status codes, never a 500 on user input.

Every error body is ``{"detail": "<readable message>"}`` (validation errors add ``errors``).

Bad input is a 422 only when it is said to be: the request schemas' validation
(``RequestValidationError``) and ``InvalidInput``, which the routes raise, or convert a
learner's ``ValueError`` to where the learner checks what the client sent. Any other
exception, a ``ValueError`` included, is a bug: a logged 500 with a generic message.
"""

from __future__ import annotations

import logging
from typing import Any

from aiokafka.errors import KafkaError
from fastapi import FastAPI, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from redis.exceptions import RedisError, SlotNotCoveredError
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.api.broker import BrokerUnavailable
from service.api.schemas import SPEC_DISCRIMINATOR, VECTOR_FORMS
from service.api.serving import CheckpointUnreadable
from service.store.connect import is_oom

logger = logging.getLogger(__name__)

RETRY = {"Retry-After": "5"}  # seconds; 503s are transient outages


class InvalidInput(Exception):
    """The client's input is wrong (422 with this message): a dimension, a limit, a label the
    learner refuses, a malformed header. Deliberately not a ``ValueError``: a ``ValueError``
    from a bug must not reach the client as an input error."""


class NotSupported(Exception):
    """The model's learner lacks the capability the endpoint needs (409)."""


class RequestTooCostly(Exception):
    """The request would cost more than ``ONLINEPREDICT_MAX_REQUEST_COST`` (413, refused
    before any work; ``service/api/cost.py``)."""


def _form_tag(parts: list[str], i: int) -> bool:
    """``parts[i]`` is the tag pydantic puts after a vector (its form, list or object:
    ``schemas.VECTOR_FORMS``), which the client did not write."""
    if i == 0 or parts[i] not in VECTOR_FORMS:
        return False
    return parts[i - 1] == "x" or (i > 1 and parts[i - 2] in ("instances", "vectors"))


def _loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    parts = [p for i, p in enumerate(parts) if not _form_tag(parts, i)]
    out = ""
    for p in parts:
        out += f"[{p}]" if p.isdigit() else (f".{p}" if out else p)
    return out or "body"


def _message(e: dict[str, Any], body: Any) -> str:
    if e.get("type") == "union_tag_invalid":  # e.g. an unknown learner kind
        ctx = e.get("ctx") or {}
        field = str(ctx.get("discriminator", "")).strip("'")
        return f"{field}: unknown {field} {ctx.get('tag')!r}; known: {ctx.get('expected_tags')}"
    loc = tuple(e.get("loc", ()))
    if len(loc) > 1 and isinstance(body, dict) and body.get(SPEC_DISCRIMINATOR) == loc[1]:
        loc = loc[:1] + loc[2:]  # pydantic names the union's variant: the client did not
    return f"{_loc(loc)}: {e.get('msg', 'invalid')}"


def readable(errors: list[dict[str, Any]], body: Any = None) -> str:
    msgs = [_message(e, body) for e in errors[:10]]
    more = len(errors) - len(msgs)
    return "; ".join(msgs) + (f"; and {more} more" if more > 0 else "")


def _error(
    code: int, detail: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"detail": detail, **extra}, status_code=code, headers=headers)


async def _validation(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errs = list(exc.errors())
    # Drop echoed inputs: they may hold NaN, which JSON cannot carry.
    slim = [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errs
    ]
    detail = readable(errs, exc.body)
    return _error(status.HTTP_422_UNPROCESSABLE_CONTENT, detail, errors=slim)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    # Starlette answers 400 for a body it cannot parse (e.g. not UTF-8): that is bad input.
    if exc.status_code == status.HTTP_400_BAD_REQUEST:
        detail = f"request body could not be parsed as JSON: {exc.detail}"
        return _error(status.HTTP_422_UNPROCESSABLE_CONTENT, detail)
    return await http_exception_handler(request, exc)


async def _invalid_input(_: Request, exc: Exception) -> JSONResponse:
    return _error(status.HTTP_422_UNPROCESSABLE_CONTENT, str(exc) or type(exc).__name__)


async def _not_supported(_: Request, exc: Exception) -> JSONResponse:
    return _error(status.HTTP_409_CONFLICT, str(exc))


async def _too_costly(_: Request, exc: Exception) -> JSONResponse:
    return _error(status.HTTP_413_CONTENT_TOO_LARGE, str(exc))


async def _redis_down(request: Request, exc: Exception) -> JSONResponse:
    if is_oom(exc):  # over its maxmemory (noeviction): refused, nothing half-written
        logger.warning("Redis full on %s %s: %s", request.method, request.url.path, exc)
        detail = "Redis is full (over its memory limit): nothing was stored; retry later"
        return _error(status.HTTP_503_SERVICE_UNAVAILABLE, detail, RETRY)
    logger.warning("Redis unavailable on %s %s: %s", request.method, request.url.path, exc)
    return _error(status.HTTP_503_SERVICE_UNAVAILABLE, f"Redis unavailable: {exc}", RETRY)


async def _kafka_down(request: Request, exc: Exception) -> JSONResponse:
    logger.warning("Kafka unavailable on %s %s: %s", request.method, request.url.path, exc)
    msg = str(exc) if isinstance(exc, BrokerUnavailable) else f"Kafka unavailable: {exc}"
    return _error(status.HTTP_503_SERVICE_UNAVAILABLE, msg, RETRY)


async def _checkpoint(_: Request, exc: Exception) -> JSONResponse:
    return _error(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc))


async def _bug(request: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return _error(status.HTTP_500_INTERNAL_SERVER_ERROR, "internal error (logged)")


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(InvalidInput, _invalid_input)
    app.add_exception_handler(NotSupported, _not_supported)
    app.add_exception_handler(RequestTooCostly, _too_costly)
    app.add_exception_handler(RedisError, _redis_down)
    # a cluster shard without a master (a failover under way) is not a RedisError
    app.add_exception_handler(SlotNotCoveredError, _redis_down)
    app.add_exception_handler(KafkaError, _kafka_down)
    app.add_exception_handler(BrokerUnavailable, _kafka_down)
    app.add_exception_handler(CheckpointUnreadable, _checkpoint)
    app.add_exception_handler(Exception, _bug)
