"""How ``onlinepredict api`` serves HTTP: uvicorn with a header timeout and the process's
file descriptor limit raised (docs/security.md, "Limits").

uvicorn bounds an idle keep-alive connection (``timeout_keep_alive``) but not one that
sends its request line and headers slowly: each such connection holds a file descriptor
for as long as the client likes, and at the descriptor limit (256 where the issue was
measured) every new connection fails, ``/healthz`` included. ``HeaderDeadline`` closes a
connection whose request line and headers are not complete ``header_timeout_s`` after it
opened (or after its previous answer). The body's own deadline is the middleware's
(``body_timeout_s``: ASGI code runs once the headers are in). ``raise_fd_limit`` lifts
the soft descriptor limit to the hard one so that many slow connections do not starve new
ones before their timeouts close them.

The subclasses hook uvicorn's protocol classes (``connection_made``, the end of the
headers, ``on_response_complete``): tested against uvicorn's httptools and h11 protocols
in ``tests/security/test_cost_slow_clients.py``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from service.config import Settings

logger = logging.getLogger(__name__)


class _HeaderDeadlineMixin:
    """Close the connection when a request's headers are not complete in time."""

    header_timeout: float = 10.0
    transport: Any
    loop: asyncio.AbstractEventLoop
    _header_timer: asyncio.TimerHandle | None = None

    def _arm_header_timer(self) -> None:
        self._cancel_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout, self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            logger.info(
                "closed a connection whose request headers took over %g s"
                " (ONLINEPREDICT_HEADER_TIMEOUT_S)",
                self.header_timeout,
            )
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():  # the next request's headers, on keep-alive
            self._arm_header_timer()


def protocol_class(settings: Settings) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol ("auto": httptools when installed, else h11) with the
    header deadline of ``settings``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency (uvicorn[standard])
        return h11_protocol_class(settings)

    class HttpToolsWithDeadline(_HeaderDeadlineMixin, HttpToolsProtocol):
        header_timeout = settings.header_timeout_s

        def on_headers_complete(self) -> None:
            self._cancel_header_timer()
            super().on_headers_complete()

    return HttpToolsWithDeadline


def h11_protocol_class(settings: Settings) -> type[asyncio.Protocol]:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class H11WithDeadline(_HeaderDeadlineMixin, H11Protocol):
        header_timeout = settings.header_timeout_s

        def handle_events(self) -> None:
            super().handle_events()
            # h11 leaves IDLE once a request's headers are parsed
            if self.conn.their_state is not h11.IDLE:
                self._cancel_header_timer()

    return H11WithDeadline


def raise_fd_limit() -> tuple[int, int] | None:
    """Lift the soft limit on open files to the hard one; (before, after), or None where
    there is no such limit (not POSIX)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65_536)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:  # e.g. macOS caps it below an infinite hard limit
        logger.warning("could not raise the open-files limit from %d: %s", soft, exc)
        return soft, soft
    return soft, target


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run``: the protocol with the header deadline."""
    return {"http": protocol_class(settings)}
