"""The metrics listener: the API's Prometheus exposition on a port of its own
(``ONLINEPREDICT_METRICS_HOST:ONLINEPREDICT_METRICS_PORT``, 127.0.0.1:9101 by default),
without a key, so per-model ids and figures leave the API port (where ``/metrics`` needs
the ``read`` scope once keys are set). Served by a second uvicorn server on the API's
event loop, started and stopped by the API's lifespan.

Port already taken (a second API process on the same host, say): a warning in the log and
the API runs on without a listener; give each process its own port (docs/security.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Generator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0


class _Server(uvicorn.Server):
    """A uvicorn server that leaves the signals to the API's own server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind(host: str, port: int) -> socket.socket | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        logger.warning(
            "metrics listener not started on %s:%d (%s): this API serves its metrics only on"
            " its own port's /metrics (read scope); set ONLINEPREDICT_METRICS_PORT to a free"
            " port, or 0 for none",
            host,
            port,
            exc.strerror or exc,
        )
        return None
    sock.setblocking(False)
    return sock


class MetricsListener:
    """``start`` binds and serves ``GET /metrics`` with ``render()``; ``stop`` closes it."""

    def __init__(self, render: Callable[[], Awaitable[bytes]], host: str, port: int) -> None:
        self.host, self.port = host, port
        self._render = render
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    async def _metrics(self, request: Request) -> Response:
        return Response(await self._render(), media_type=CONTENT_TYPE_LATEST)

    async def start(self) -> bool:
        sock = _bind(self.host, self.port)
        if sock is None:
            return False
        self._sock = sock
        app = Starlette(routes=[Route("/metrics", self._metrics, methods=["GET"])])
        config = uvicorn.Config(
            app, lifespan="off", access_log=False, log_config=None, server_header=False
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve([sock]), name="metrics-listener")
        logger.info("metrics listener on http://%s:%d/metrics", self.host, self.port)
        return True

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            async with asyncio.timeout(STOP_TIMEOUT_S):
                await self._task
        except TimeoutError:
            self._task.cancel()
        finally:
            if self._sock is not None:
                self._sock.close()
