"""The predict hot path's pipelined Redis connection (``service.api.redis_pipe``): same
replies and the same exception types as redis-py, reconnects, timeouts, order of replies."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from service.api.redis_pipe import RedisPipe
from service.embedded import free_port, start_redis

pytestmark = pytest.mark.service


@pytest.fixture
def server(tmp_path) -> Iterator[object]:  # type: ignore[no-untyped-def]
    srv = start_redis(data_dir=str(tmp_path))
    try:
        yield srv
    finally:
        srv.stop()


def pipe_for(url: str, timeout: float = 2.0) -> RedisPipe:
    return RedisPipe(url, socket_timeout=timeout, connect_timeout=1.0)


@contextlib.asynccontextmanager
async def pipe_and_client(url: str) -> AsyncIterator[tuple[RedisPipe, Redis]]:
    """A pipe and a redis-py client of ``url``, both closed on the way out."""
    pipe, client = pipe_for(url), Redis.from_url(url)
    try:
        yield pipe, client
    finally:
        pipe.close()
        await client.aclose()


def test_replies_match_redis_py(server) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        async with pipe_and_client(server.url) as (pipe, client):
            script = "return {ARGV[1], tonumber(ARGV[2]), false, {ARGV[1]}}"
            sha = await client.script_load(script)
            assert await pipe.call("SET", "k", b"\x00v\r\n") == b"OK"  # raw reply
            for args in [("GET", "k"), ("GET", "nope"), ("HGET", "nope", "f"), ("EXISTS", "k")]:
                assert await pipe.call(*args) == await client.execute_command(*args)
            assert await client.evalsha(sha, 0, "a", 7) == [b"a", 7, None, [b"a"]]
            assert await pipe.call("EVALSHA", sha, 0, "a", 7) == [b"a", 7, None, [b"a"]]
            with pytest.raises(NoScriptError):
                await pipe.call("EVALSHA", "0" * 40, 0)
            with pytest.raises(ResponseError, match="wrong number of arguments"):
                await pipe.call("GET")
            # Concurrent calls on the one connection get their own replies, in order.
            values = await asyncio.gather(*(pipe.call("ECHO", str(i)) for i in range(200)))
            assert values == [str(i).encode() for i in range(200)]

    asyncio.run(go())


def test_database_number_from_the_url(server) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        async with pipe_and_client(server.url.rsplit("/", 1)[0] + "/3") as (pipe, client):
            await pipe.call("SET", "in-db-3", "yes")
            assert await client.get("in-db-3") == b"yes"

    asyncio.run(go())


def test_down_then_restarted_server(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        srv = start_redis(data_dir=str(tmp_path))
        pipe = pipe_for(srv.url)
        try:
            assert await pipe.call("PING") == b"PONG"
            srv.kill()
            with pytest.raises(RedisConnectionError):
                await pipe.call("PING")
            with pytest.raises(RedisConnectionError):  # refused while it is down
                await pipe.call("PING")
            srv = start_redis(port=srv.port, data_dir=str(tmp_path))
            assert await pipe.call("PING") == b"PONG"  # reconnected
        finally:
            pipe.close()
            srv.stop()

    asyncio.run(go())


def test_unreachable_server_is_a_connection_error() -> None:
    async def go() -> None:
        pipe = pipe_for(f"redis://127.0.0.1:{free_port()}/0")
        with pytest.raises(RedisConnectionError):
            await pipe.call("PING")

    asyncio.run(go())


def test_silent_server_times_out_and_fails_every_waiter() -> None:
    async def go() -> None:
        async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1 << 16)  # reads, never answers
            await asyncio.sleep(10)

        srv = await asyncio.start_server(mute, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        pipe = pipe_for(f"redis://127.0.0.1:{port}/0", timeout=0.2)
        try:
            first, second = await asyncio.gather(
                pipe.call("PING"), pipe.call("PING"), return_exceptions=True
            )
            assert isinstance(first, RedisTimeoutError)
            assert isinstance(second, RedisTimeoutError | RedisConnectionError)
        finally:
            pipe.close()
            srv.close()

    asyncio.run(go())


def test_a_cancelled_caller_does_not_shift_the_replies(server) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        pipe = pipe_for(server.url)
        try:
            await pipe.call("PING")
            slow = asyncio.ensure_future(pipe.call("ECHO", "cancelled"))
            await asyncio.sleep(0)  # written
            slow.cancel()
            assert await pipe.call("ECHO", "mine") == b"mine"
        finally:
            pipe.close()

    asyncio.run(go())


def test_supports_plain_tcp_only() -> None:
    assert RedisPipe.supports("redis://127.0.0.1:6379/0")
    assert not RedisPipe.supports("rediss://127.0.0.1:6379/0")
    assert not RedisPipe.supports("unix:///tmp/redis.sock")


def test_password_and_database_from_the_url(server) -> None:  # type: ignore[no-untyped-def]
    async def go() -> None:
        admin = Redis.from_url(server.url)
        await admin.config_set("requirepass", "s3cret")
        base = f"redis://:s3cret@127.0.0.1:{server.port}"
        pipe, wrong = pipe_for(f"{base}/2"), pipe_for(f"redis://:nope@127.0.0.1:{server.port}/0")
        client = Redis.from_url(f"{base}/2")
        try:
            assert await pipe.call("SET", "authed", "yes") == b"OK"
            assert await client.get("authed") == b"yes"  # in database 2
            with pytest.raises(ResponseError):
                await wrong.call("PING")
            with pytest.raises(ResponseError):  # no half-set-up connection is kept
                await wrong.call("PING")
        finally:
            pipe.close()
            wrong.close()
            await client.config_set("requirepass", "")
            await client.aclose()
            await admin.aclose()

    asyncio.run(go())
