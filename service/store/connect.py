"""The Redis client every process uses, made from the settings in one place.

``ONLINEPREDICT_REDIS_MODE=standalone`` (the default) gives a ``redis.asyncio.Redis``;
``cluster`` gives a ``redis.asyncio.cluster.RedisCluster`` whose startup node is
``ONLINEPREDICT_REDIS_URL`` (it learns the other nodes and the slot map from it, and again
after a failover). Both speak the same commands; what differs is handled here:

- a multi-key read (``MGET``) over keys of several models spans slots: :func:`mget`;
- a Lua script queued on a cluster pipeline is sent with its body (``EVAL``), since
  redis-py's cluster pipeline does not load scripts and a replica promoted by a failover
  may not have them cached: :func:`queue_script`;
- the store's epoch (which Redis process holds the data) is every primary's ``run_id``:
  :func:`store_epoch`.

Every script and transaction touches one model's keys only (``{id}`` hash tag: one slot);
``tests/service/test_cluster_slots.py`` holds every script to that.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import OutOfMemoryError, ResponseError

from service.config import Settings

# What the store functions accept: either client (and their pipelines, as ``Any``).
RedisClient: TypeAlias = Redis | RedisCluster


OOM_TEXT = "OOM command not allowed"  # a script's write refused: ERR Error running script ...


def is_oom(exc: BaseException) -> bool:
    """Redis refused a write for memory (over ``maxmemory`` with ``noeviction``): a command's
    ``-OOM`` reply (redis-py's ``OutOfMemoryError``), or a script's first write refused, which
    Redis 6 reports as ``ERR Error running script ... -OOM command not allowed ...``. Redis
    checks memory at a script's first write only, so a refused script wrote nothing."""
    return isinstance(exc, ResponseError) and (
        isinstance(exc, OutOfMemoryError) or OOM_TEXT in str(exc)
    )


def redis_client(settings: Settings, **options: Any) -> RedisClient:
    """The client for ``settings.redis_url`` in ``settings.redis_mode``; ``options`` are
    redis-py connection options (timeouts, ``decode_responses``, ...). Connects lazily."""
    if settings.redis_mode == "cluster":
        return RedisCluster.from_url(settings.redis_url, **options)
    return Redis.from_url(settings.redis_url, **options)


def is_cluster(client: Any) -> bool:
    return isinstance(client, RedisCluster | ClusterPipeline)


def as_text(value: Any) -> str:
    """A Redis reply as text: bytes decoded as UTF-8, anything else by ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)


async def mget(client: RedisClient, keys: Sequence[str]) -> list[Any]:
    """``MGET`` on one server; on a cluster, one ``MGET`` per slot (redis-py's
    ``mget_nonatomic``): the values are read apart, which no caller relies on."""
    if isinstance(client, RedisCluster):
        return await client.mget_nonatomic(list(keys))
    return await client.mget(list(keys))


async def queue_script(
    pipe: Any, script: AsyncScript, keys: Sequence[Any], args: Sequence[Any]
) -> None:
    """Queue ``script`` on a pipeline of either client."""
    if isinstance(pipe, ClusterPipeline):
        body = script.script
        pipe.eval(body if isinstance(body, str) else bytes(body).decode(), len(keys), *keys, *args)
    else:
        await script(keys=keys, args=args, client=pipe)


async def store_epoch(client: RedisClient) -> str:
    """Which Redis processes hold the data: the ``run_id`` of the server, or on a cluster
    the sorted ``run_id`` of every primary, so a failover on any shard (a replica that may
    have missed its master's last writes taking over) changes it (docs/reliability.md)."""
    if isinstance(client, RedisCluster):
        infos = await client.info("server", target_nodes=RedisCluster.PRIMARIES)
        if "run_id" in infos:  # one primary: redis-py returns its reply unwrapped
            return str(infos["run_id"])
        return ",".join(sorted(str(info.get("run_id", "")) for info in infos.values()))
    return str((await client.info("server")).get("run_id", ""))
