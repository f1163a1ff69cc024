"""ASGI middleware: request body size limit (413) and per-route latency histogram."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import HTTPException, status
from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class LimitsAndTiming:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, latency: Histogram) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.latency = latency
        # Histogram.labels() takes a lock and validates per call: keep the children.
        self._children: dict[tuple[str, str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_code = [500]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_code[0] = message["status"]
            await send(message)

        try:
            declared, chunked = _framing(scope)
            if declared is not None and declared > self.max_body:
                await _reject(send_wrapper, self.max_body)
                return
            # A body framed by Content-Length alone cannot grow past it (the server reads
            # exactly that many bytes); any other body is counted as it arrives.
            counted = receive if declared is not None and not chunked else self._counting(receive)
            await self.app(scope, counted, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "unmatched"
            key = (scope.get("method", ""), path, str(status_code[0]))
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self.latency.labels(*key)
            child.observe(time.perf_counter() - start)

    def _counting(self, receive: Receive) -> Receive:
        seen = 0

        async def wrapped() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    # An HTTPException passes FastAPI's body parsing unchanged (others become 400).
                    raise HTTPException(
                        status.HTTP_413_CONTENT_TOO_LARGE, _too_large(self.max_body)
                    )
            return message

        return wrapped


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


async def _reject(send: Any, limit: int) -> None:
    body = json.dumps({"detail": _too_large(limit)}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
