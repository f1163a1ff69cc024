"""ASGI middleware: what bounds one request's cost before any route runs, and the
per-route latency histogram (docs/security.md, "Limits").

In order, for each HTTP request:

1. a body declared larger than ``max_body_bytes``: 413;
2. the rate limit of the caller and the route's scope (``service/api/ratelimit.py``): 429
   with ``Retry-After``, before the body is read;
3. the body is read here, whole, within ``body_timeout_s`` of the headers (else 408 and
   the connection closed) and counted (413 past ``max_body_bytes``), then replayed to the
   route. So a slow body holds a connection and a coroutine, never a concurrency slot;
4. at most ``max_concurrency`` requests are worked on at once (``/healthz`` exempt): over
   it, 503 with ``Retry-After``;
5. a client that disconnects before its answer is counted as status 499 in
   ``http_request_duration_seconds`` and logged in one line (Starlette's
   ``ClientDisconnect`` would otherwise reach the 500 handler with a traceback).

The request line and headers are bounded by ``service/api/http.py`` (a header timeout in
the HTTP protocol itself: no ASGI code runs before the headers are complete).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from typing import Any

from prometheus_client import Histogram
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.ratelimit import RateLimiter, scope_of

logger = logging.getLogger(__name__)

CLIENT_CLOSED = 499  # nginx's code for a client that left before its answer
EXEMPT = frozenset({"/healthz"})  # never refused for load: a liveness probe must answer
BUSY_RETRY_S = 1


class _Disconnected(Exception):
    """The client left while its body was read."""


class _TooLarge(Exception):
    pass


class LimitsAndTiming:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        latency: Histogram,
        max_concurrency: int | None = None,
        body_timeout_s: float | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.latency = latency
        self.max_concurrency = max_concurrency
        self.body_timeout = body_timeout_s
        self.limiter = limiter if limiter is not None and limiter.enabled else None
        self.in_flight = 0
        # Histogram.labels() takes a lock and validates per call: keep the children.
        self._children: dict[tuple[str, str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_code = [500]
        gone = [False]
        started = [False]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_code[0] = message["status"]
                started[0] = True
            await send(message)

        async def watching() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone[0] = True
            return message

        try:
            await self._handle(scope, watching, send_wrapper)
        except (_Disconnected, ClientDisconnect):
            gone[0] = True
        finally:
            # gone before an answer began (or the route failed on the disconnect): 499
            if gone[0] and (not started[0] or status_code[0] == 500):
                status_code[0] = CLIENT_CLOSED
            if status_code[0] == CLIENT_CLOSED:
                client = scope.get("client")
                logger.info(
                    "client %s disconnected before its answer: %s %s after %.3f s (499)",
                    client[0] if client else "?",
                    scope.get("method", ""),
                    scope.get("path", ""),
                    time.perf_counter() - start,
                )
            route = scope.get("route") or _route(scope)
            path = getattr(route, "path", None) or "unmatched"
            key = (scope.get("method", ""), path, str(status_code[0]))
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self.latency.labels(*key)
            child.observe(time.perf_counter() - start)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared, chunked = _framing(scope)
        if declared is not None and declared > self.max_body:
            await _reply(send, 413, _too_large(self.max_body), close=True)
            return
        if self.limiter is not None:
            needed = scope_of(scope["method"], scope["path"])
            if needed is not None:
                wait = await self.limiter.retry_after(needed, _who(scope))
                if wait is not None:
                    retry = max(1, math.ceil(wait))
                    await _reply(
                        send,
                        429,
                        f"rate limit of the {needed!r} scope reached"
                        f" ({self.limiter.items[needed]}, ONLINEPREDICT_RATE_LIMITS);"
                        f" retry in {retry} s",
                        {"retry-after": str(retry)},
                        close=chunked or bool(declared),  # its body is left unread
                    )
                    return
        if chunked or (declared or 0) > 0:
            try:
                body = await self._read_body(receive)
            except TimeoutError:
                await _reply(
                    send,
                    408,
                    f"request body not received within {self.body_timeout:g} s"
                    " (ONLINEPREDICT_BODY_TIMEOUT_S)",
                    close=True,
                )
                return
            except _TooLarge:
                await _reply(send, 413, _too_large(self.max_body), close=True)
                return
            receive = replay_body(body, receive)
        if self.max_concurrency is None or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_concurrency:
            await _reply(
                send,
                503,
                f"server busy: {self.in_flight} requests in progress in this API process"
                " (ONLINEPREDICT_MAX_CONCURRENCY); retry shortly",
                {"retry-after": str(BUSY_RETRY_S)},
            )
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _read_body(self, receive: Receive) -> bytes:
        """The whole body, within the body timeout; ``_Disconnected``, ``_TooLarge``."""
        chunks: list[bytes] = []
        seen = 0
        deadline = None
        if self.body_timeout is not None:
            deadline = asyncio.get_running_loop().time() + self.body_timeout
        async with asyncio.timeout_at(deadline):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise _Disconnected
                chunk = message.get("body", b"")
                if chunk:
                    seen += len(chunk)
                    if seen > self.max_body:
                        raise _TooLarge
                    chunks.append(chunk)
                if not message.get("more_body", False):
                    break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_MODEL_PATH = re.compile(r"^/v1/models/[^/]+(/[a-z]+)?$")
_FIXED_PATHS = frozenset({"/v1/models", "/healthz", "/readyz", "/metrics", "/v1/dashboard/data"})


class _Template:
    def __init__(self, path: str) -> None:
        self.path = path


def _route(scope: Scope) -> _Template | None:
    """The route template of a request refused here, before routing, so that its latency
    keeps the route's label (a bounded set: a model id never becomes a label)."""
    path = scope.get("path", "")
    if path in _FIXED_PATHS:
        return _Template(path)
    m = _MODEL_PATH.match(path)
    return _Template("/v1/models/{model_id}" + (m.group(1) or "")) if m else None


def _who(scope: Scope) -> str:
    """The rate limit's subject: a valid key's name, else the client address."""
    ring = getattr(getattr(scope.get("app"), "state", None), "keyring", None)
    if ring is not None and ring.configured:
        secret = _secret(scope)
        principal = ring.authenticate(secret) if secret else None
        if principal is not None:
            return f"key:{principal.name}"
    client = scope.get("client")
    return f"addr:{client[0] if client else 'unknown'}"


def _secret(scope: Scope) -> str | None:
    """X-API-Key, else ``Authorization: Bearer`` (as ``service/api/security.py`` reads them)."""
    bearer = None
    for name, value in scope.get("headers", ()):
        if name == b"x-api-key":
            return value.decode("latin-1")
        if name == b"authorization":
            kind, _, cred = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer":
                bearer = cred.strip()
    return bearer


def replay_body(body: bytes, receive: Receive) -> Receive:
    """``receive`` for an app that reads the body again: the body read already, then
    whatever the connection says next (a disconnect)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _too_large(limit: int) -> str:
    return f"request body larger than the limit of {limit} bytes"


def _framing(scope: Scope) -> tuple[int | None, bool]:
    """(declared Content-Length or None, whether a Transfer-Encoding header is present)."""
    declared: int | None = None
    chunked = False
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                chunked = True  # unparsable: count the body as it arrives
        elif name == b"transfer-encoding":
            chunked = True
    return declared, chunked


async def _reply(
    send: Send, status: int, detail: str, headers: dict[str, str] | None = None, close=False
) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    if close:  # the rest of the body is not read: the connection cannot carry another request
        raw.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
