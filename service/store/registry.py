"""Model specs in Redis: ``model:{id}:spec`` (JSON) and the ``models`` set.

A spec is the dict ``{"id": str, "kind": str, "dim": int, "params": {...}}``, with
``"features": [names]`` when the model names its features, stored as JSON. A spec stored
before ``features`` existed may name an index tracker's features ``assets`` instead:
:func:`feature_names` reads either. Validation against the learner's constructor is the
caller's job (the API does it; ``learners.build(kind, dim, **params)`` raises
``ValueError`` with a readable message).

Every function is async and takes a ``redis.asyncio.Redis`` or ``RedisCluster``
(``service.store.connect``; ``decode_responses`` either way) and a
:class:`~service.store.keys.Keys`::

    await create_spec(redis, keys, spec)            # -> bool (False: id exists)
    await get_spec(redis, keys, "m1")               # -> dict | None
    await list_specs(redis, keys)                   # -> list[dict], sorted by id
    await delete_spec(redis, keys, "m1")            # -> bool (False: unknown id)

``delete_spec`` also removes the model's state, history, seen-ids and series keys and takes it off
its partition's ``partition-models`` set; the worker that owns the model notices on its next
checkpoint (version and incarnation check) and drops it.

Incarnations (docs/reliability.md, "Re-creating a model"): a spec created through the API
carries ``incarnation`` (a random id) and ``origin`` (``partition``, ``offset``, ``event_id``
of the ``created`` marker event the API produced before storing the spec). The model's
lineage starts there: a worker treats the origin as the model's first stamp, so a model
re-created with the id of a deleted one never learns the deleted one's events, and the
origin's partition is the model's home partition for life.
"""

from __future__ import annotations

import json
from typing import Any

from clients import wire
from service.store import connect
from service.store.connect import RedisClient, as_text
from service.store.keys import Keys


def feature_names(spec: dict[str, Any]) -> list[str] | None:
    """A stored spec's feature names (``features``, else the earlier ``assets``), or None."""
    names = spec.get("features") or spec.get("assets")
    return [str(n) for n in names] if names else None


def home_partition(spec: dict[str, Any]) -> int | None:
    """The partition a model lives on for life (its origin's), or None for a spec made
    before incarnations (it lives where its first stamp is)."""
    origin = spec.get("origin")
    return int(origin["partition"]) if isinstance(origin, dict) else None


def created_marker(model: str, incarnation: str) -> dict[str, str]:
    """The control event that starts a model's lineage in the log (docs/events.md §5;
    built by ``clients/wire.py``): a worker never applies the model's events at or before it."""
    return wire.created(model, incarnation)


def with_origin(
    spec: dict[str, Any], incarnation: str, partition: int, offset: int
) -> dict[str, Any]:
    """The spec to store for a new incarnation whose ``created_marker`` the log holds at
    ``partition``/``offset`` (its origin: first stamp and home partition)."""
    marker_id = created_marker(str(spec["id"]), incarnation)["id"]
    origin = {"partition": partition, "offset": offset, "event_id": marker_id}
    return {**spec, "incarnation": incarnation, "origin": origin}


async def create_spec(
    redis: RedisClient,
    keys: Keys,
    spec: dict[str, Any],
    *,
    overwrite: bool = False,
    topic: str | None = None,
) -> bool:
    """Store ``spec`` under ``spec["id"]``; False (and no change) if it exists and not
    ``overwrite``. With ``topic``, a spec with an origin is also registered on its home
    partition's ``partition-models`` set, so a worker assigned that partition replays from
    the origin even if the model's first checkpoint is lost."""
    model = str(spec["id"])
    stored = await redis.set(keys.spec(model), _encode(spec), nx=not overwrite)
    if not stored:
        return False
    home = home_partition(spec)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.sadd(keys.models(), model)
        # a new model starts with no series: a sample that raced its predecessor's delete
        # must not show as its past
        pipe.delete(keys.series(model))
        if topic is not None and home is not None:
            pipe.sadd(keys.partition_models(topic, home), model)
        await pipe.execute()
    return True


async def replace_spec(redis: RedisClient, keys: Keys, spec: dict[str, Any]) -> None:
    """Overwrite a stored spec in place: its registration (models set, partition) stays."""
    await redis.set(keys.spec(str(spec["id"])), _encode(spec), xx=True)


def _encode(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


async def get_spec(redis: RedisClient, keys: Keys, model: str) -> dict[str, Any] | None:
    raw = await redis.get(keys.spec(model))
    return None if raw is None else json.loads(raw)


async def get_specs(redis: RedisClient, keys: Keys, models: list[str]) -> dict[str, dict[str, Any]]:
    """Specs of many models in one round trip; unknown ids are left out."""
    if not models:
        return {}
    raws = await connect.mget(redis, [keys.spec(m) for m in models])
    return {m: json.loads(r) for m, r in zip(models, raws, strict=True) if r is not None}


async def list_model_ids(redis: RedisClient, keys: Keys) -> list[str]:
    return sorted(as_text(m) for m in await redis.smembers(keys.models()))


async def list_specs(redis: RedisClient, keys: Keys) -> list[dict[str, Any]]:
    ids = await list_model_ids(redis, keys)
    specs = await get_specs(redis, keys, ids)
    return [specs[m] for m in ids if m in specs]


async def delete_spec(
    redis: RedisClient, keys: Keys, model: str, *, topic: str | None = None
) -> bool:
    """Delete the spec and the model's state, history, seen ids, series and rollback
    listing; False if unknown.
    With ``topic``, also take the model off the ``partition-models`` sets of its home
    partition and of its last stamp's partition (it must not pin a partition's start)."""
    spec = await get_spec(redis, keys, model)
    stamp_partition = await redis.hget(keys.state(model), "partition")
    home = home_partition(spec) if spec else None
    partitions = set() if home is None else {home}
    if stamp_partition not in (None, b"", ""):
        partitions.add(int(stamp_partition))
    removed = await redis.delete(keys.spec(model))
    async with redis.pipeline(transaction=False) as pipe:
        pipe.delete(
            keys.state(model),
            keys.history(model),
            keys.seen(model),
            keys.series(model),
            keys.rollbacks(model),
        )
        pipe.srem(keys.models(), model)
        if topic is not None:
            for p in partitions:
                pipe.srem(keys.partition_models(topic, p), model)
        await pipe.execute()
    return bool(removed)
