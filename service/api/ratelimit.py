"""Rate limits per key and scope (``ONLINEPREDICT_RATE_LIMITS``), shared by every API
process through Redis with the ``limits`` library (its sliding window counter: one Lua
call per request, two keys per window, on one cluster slot).

Who is counted: the name of a valid API key (every secret of a name shares its count), or,
without a valid key (no keys configured, or a missing or wrong secret), the client
address. The scope is the route's (``scope_of``, the same as ``service/api/security.py``
requires). Over the limit: 429 with ``Retry-After`` (seconds until the window lets one
more in). Redis unreachable: the limiter fails open (one warning per
``WARN_EVERY_S``, no Redis call for ``SKIP_AFTER_FAILURE_S`` after a failure): the other
routes answer 503 anyway when they need Redis, and the concurrency limit and the cost
budget still bound each process (docs/security.md, "Limits").
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from typing import Any

from limits import RateLimitItem, parse
from limits.aio.storage import RedisClusterStorage, RedisStorage
from limits.aio.strategies import SlidingWindowCounterRateLimiter

from service.config import Settings

logger = logging.getLogger(__name__)

SCOPES = ("read", "predict", "ingest", "admin")
UNITS = {"s": "second", "m": "minute", "h": "hour"}
_ENTRY = re.compile(r"^(read|predict|ingest|admin)\s*=\s*(?:(off)|(\d+)\s*/\s*(s|m|h))$")
OFF = ("", "off", "none", "0")
WARN_EVERY_S = 10.0
SKIP_AFTER_FAILURE_S = 1.0
REDIS_TIMEOUT_S = 0.5  # a slow Redis must not hold every request for the API's 5 s

_MODEL_ROUTE = re.compile(r"^/v1/models/[^/]+(/[^/]+)?$")
_PREDICT = {"predict", "quantify"}
_INGEST = {"events", "labels", "blocks"}


def parse_rate_limits(text: str, defaults: str | None = None) -> dict[str, str]:
    """``{scope: "N/unit"}`` from ``scope=N/s`` entries (``s``, ``m`` or ``h``) laid over
    ``defaults``; ``scope=off`` drops one scope, ``off`` (or an empty text) all of them.
    ``ValueError`` naming the entry that is not of this form."""
    text = text.strip().lower()
    if text in OFF:
        return {}
    out = parse_rate_limits(defaults) if defaults is not None else {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        m = _ENTRY.match(item)
        if m is None:
            raise ValueError(
                f"ONLINEPREDICT_RATE_LIMITS: {item!r} is not scope=N/s (or /m, /h, or"
                f" scope=off) with a scope from {', '.join(SCOPES)}"
            )
        scope, off, n, unit = m.groups()
        if off:
            out.pop(scope, None)
        else:
            out[scope] = f"{int(n)}/{unit}"
    return out


def scope_of(method: str, path: str) -> str | None:
    """The scope a request needs (docs/security.md, "Keys and scopes"), or None for the
    routes outside ``/v1`` and ``/metrics`` (health, dashboard assets, docs): unlimited."""
    if path == "/metrics":
        return "read"
    if not path.startswith("/v1/"):
        return None
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    m = _MODEL_ROUTE.match(path)
    action = (m.group(1) or "")[1:] if m else ""
    if method == "POST" and action in _PREDICT:
        return "predict"
    if method == "POST" and action in _INGEST:
        return "ingest"
    return "admin"  # create, delete, rollback and anything new: the strictest


def _storage_uri(settings: Settings) -> tuple[str, type[RedisStorage]]:
    url = settings.redis_url
    if settings.redis_mode == "cluster":
        # limits' cluster URI: async+redis+cluster://[user:pass@]host:port[,host:port]
        rest = url.split("://", 1)[1].split("/", 1)[0]
        return f"async+redis+cluster://{rest}", RedisClusterStorage
    return f"async+{url}", RedisStorage


class RateLimiter:
    """One per API process; the counts live in Redis under ``<key_prefix>ratelimit``."""

    def __init__(self, settings: Settings, *, clock: Any = time.monotonic) -> None:
        default = Settings.model_fields["rate_limits"].default
        self.items: dict[str, RateLimitItem] = {
            scope: parse(f"{text.split('/')[0]}/{UNITS[text.split('/')[1]]}")
            for scope, text in parse_rate_limits(settings.rate_limits, default).items()
        }
        self._clock = clock
        self._skip_until = 0.0
        self._warned = -math.inf
        # the storage's redis-py client is bound to the event loop that first used it:
        # one per loop (tests drive one app from several loops), closed on its own loop
        self._storage: RedisStorage | None = None
        self._limiter: SlidingWindowCounterRateLimiter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._uri, self._cls = _storage_uri(settings)
        self._key_prefix = f"{settings.key_prefix}ratelimit"

    @property
    def enabled(self) -> bool:
        return bool(self.items)

    def _current(self) -> SlidingWindowCounterRateLimiter:
        loop = asyncio.get_running_loop()
        if self._limiter is None or self._loop is not loop:
            self._storage = self._cls(
                self._uri,
                implementation="redispy",
                key_prefix=self._key_prefix,
                socket_timeout=REDIS_TIMEOUT_S,
                socket_connect_timeout=REDIS_TIMEOUT_S,
            )
            self._limiter = SlidingWindowCounterRateLimiter(self._storage)
            self._loop = loop
        return self._limiter

    async def retry_after(self, scope: str, who: str) -> float | None:
        """None when the request may go on (and is counted), else the seconds to wait."""
        item = self.items.get(scope)
        if item is None:
            return None
        now = self._clock()
        if now < self._skip_until:
            return None
        try:
            limiter = self._current()
            if await limiter.hit(item, scope, who):
                return None
            reset = (await limiter.get_window_stats(item, scope, who)).reset_time
        except Exception as exc:  # noqa: BLE001 - any storage failure: fail open, said once
            self._skip_until = now + SKIP_AFTER_FAILURE_S
            if now - self._warned >= WARN_EVERY_S:
                self._warned = now
                logger.warning(
                    "rate limiter: Redis unavailable (%s: %s); requests are not rate"
                    " limited until it answers",
                    type(exc).__name__,
                    exc,
                )
            return None
        return max(reset - time.time(), 0.0)

    async def aclose(self) -> None:
        """Close the client of this loop's storage; one of another (finished) loop is
        dropped: its connections cannot be closed from here."""
        storage, loop = self._storage, self._loop
        self._storage = self._limiter = self._loop = None
        if storage is not None and loop is asyncio.get_running_loop():
            client = getattr(storage.bridge, "storage", None)
            if client is not None:
                await client.aclose()
