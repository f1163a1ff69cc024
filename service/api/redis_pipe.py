"""A pipelined Redis connection for the predict hot path.

redis-py's asyncio client spends ~45 us of CPU on one PING here (connection pool checkout,
retry and timeout wrappers, observability hooks): more than a third of the predict route's
budget. ``RedisPipe`` keeps one connection per API process; the commands of concurrent
requests go out together, one socket write per event-loop turn, and the replies resolve
the waiting futures first in, first out (Redis answers in order on one connection). One
timer per connection watches the oldest command's deadline. Encoding and parsing are
hiredis's.

Failures look like redis-py's, so the API's handlers map them the same way (503):
``redis.exceptions.ConnectionError`` when the server cannot be reached or the connection
drops (every command in flight fails; the next call reconnects), ``TimeoutError`` after
``socket_timeout`` (the connection is closed, since later replies could no longer be
matched), ``ResponseError``/``NoScriptError``/``OutOfMemoryError`` for an error reply.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import hiredis
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, OutOfMemoryError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError


class _Protocol(asyncio.Protocol):
    def __init__(self, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.reader = hiredis.Reader()
        self.timeout = timeout
        # (reply future, deadline) in the order the commands were written
        self.waiters: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self.unsent: list[bytes] = []  # written together once per event-loop turn
        self.transport: Any = None  # an asyncio (or uvloop) transport
        self.lost = False
        self._watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def send(self, command: bytes) -> asyncio.Future[Any]:
        """Queue one packed command; its reply resolves the future. Commands queued in the
        same event-loop turn (concurrent requests) go out in one socket write."""
        fut = self.loop.create_future()
        self.waiters.append((fut, self.loop.time() + self.timeout))
        if not self.unsent:
            self.loop.call_soon(self._flush)
        self.unsent.append(command)
        if self._watchdog is None:
            self._watchdog = self.loop.call_later(self.timeout, self._check_deadline)
        return fut

    def _flush(self) -> None:
        if not self.lost and self.unsent:
            self.transport.write(b"".join(self.unsent))
        self.unsent.clear()

    def _check_deadline(self) -> None:
        """One timer per connection instead of one per command: replies come in order, so
        the connection is stuck exactly when the oldest waiting command is overdue."""
        self._watchdog = None
        if self.lost or not self.waiters:
            return
        now = self.loop.time()
        deadline = self.waiters[0][1]
        if now >= deadline:
            self.close(RedisTimeoutError(f"Timeout reading from Redis after {self.timeout} s"))
        else:
            self._watchdog = self.loop.call_later(deadline - now, self._check_deadline)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            if not self.waiters:  # a reply nobody asked for: the stream is out of step
                self.close(RedisConnectionError("unexpected reply from Redis"))
                return
            fut = self.waiters.popleft()[0]
            if not fut.done():  # a cancelled caller's reply is dropped, the order kept
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._fail(RedisConnectionError(f"Redis connection lost: {exc or 'closed'}"))

    def close(self, exc: Exception) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()
        self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.unsent.clear()
        while self.waiters:
            fut = self.waiters.popleft()[0]
            if not fut.done():
                fut.set_exception(exc)


class RedisPipe:
    """``await pipe.call("EVALSHA", sha, 1, key, ...)``: one command, its reply (bytes, int,
    None or a list of them, as redis-py with ``decode_responses=False``)."""

    def __init__(self, url: str, *, socket_timeout: float, connect_timeout: float) -> None:
        options = parse_url(url)
        self._host = options.get("host", "localhost")
        self._port = int(options.get("port", 6379))
        self._db = int(options.get("db", 0))
        self._username = options.get("username")
        self._password = options.get("password")
        self._timeout = socket_timeout
        self._connect_timeout = connect_timeout
        self._proto: _Protocol | None = None
        self._connecting: asyncio.Lock | None = None

    @staticmethod
    def supports(url: str) -> bool:
        """Plain TCP only: TLS and Unix sockets stay with redis-py."""
        return url.startswith("redis://")

    async def call(self, *args: Any) -> Any:
        proto = self._proto
        if proto is None or proto.lost:
            proto = await self._connect()
        reply = await proto.send(hiredis.pack_command(args))
        if isinstance(reply, hiredis.ReplyError):
            message = str(reply)
            if message.startswith("NOSCRIPT"):
                raise NoScriptError(message)
            if message.startswith("OOM "):  # as redis-py's parser maps it
                raise OutOfMemoryError(message[4:])
            raise ResponseError(message)
        return reply

    async def _connect(self) -> _Protocol:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._proto is not None and not self._proto.lost:
                return self._proto
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(self._connect_timeout):
                    _, proto = await loop.create_connection(
                        lambda: _Protocol(self._timeout), self._host, self._port
                    )
            except (OSError, TimeoutError) as exc:
                raise RedisConnectionError(
                    f"Error connecting to {self._host}:{self._port}: {exc}"
                ) from exc
            self._proto = proto
            try:
                if self._password is not None:
                    user = (self._username,) if self._username else ()
                    await self.call("AUTH", *user, self._password)
                if self._db:
                    await self.call("SELECT", self._db)
            except BaseException:
                proto.close(RedisConnectionError("Redis connection set-up failed"))
                self._proto = None
                raise
            return proto

    def close(self) -> None:
        if self._proto is not None and self._proto.transport is not None:
            self._proto.transport.close()
        self._proto = None
