"""Model specs in Redis: ``model:{id}:spec`` (JSON) and the ``models`` set.

A spec is the dict ``{"id": str, "kind": str, "dim": int, "params": {...}}``, stored as
JSON. Validation against the learner's constructor is the caller's job (the API does it;
``learners.build(kind, dim, **params)`` raises ``ValueError`` with a readable message).

Every function is async and takes a ``redis.asyncio.Redis`` (``decode_responses`` either
way) and a :class:`~service.store.keys.Keys`::

    await create_spec(redis, keys, spec)            # -> bool (False: id exists)
    await get_spec(redis, keys, "m1")               # -> dict | None
    await list_specs(redis, keys)                   # -> list[dict], sorted by id
    await delete_spec(redis, keys, "m1")            # -> bool (False: unknown id)

``delete_spec`` also removes the model's state, history and seen-ids keys; the worker that
owns the model notices on its next checkpoint (version check) and drops it.
"""

from __future__ import annotations

import json
from typing import Any

from redis.asyncio import Redis

from service.store.keys import Keys


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def create_spec(
    redis: Redis, keys: Keys, spec: dict[str, Any], *, overwrite: bool = False
) -> bool:
    """Store ``spec`` under ``spec["id"]``; False (and no change) if it exists and not
    ``overwrite``."""
    model = str(spec["id"])
    payload = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    stored = await redis.set(keys.spec(model), payload, nx=not overwrite)
    if not stored:
        return False
    await redis.sadd(keys.models(), model)
    return True


async def get_spec(redis: Redis, keys: Keys, model: str) -> dict[str, Any] | None:
    raw = await redis.get(keys.spec(model))
    return None if raw is None else json.loads(raw)


async def get_specs(redis: Redis, keys: Keys, models: list[str]) -> dict[str, dict[str, Any]]:
    """Specs of many models in one round trip; unknown ids are left out."""
    if not models:
        return {}
    raws = await redis.mget([keys.spec(m) for m in models])
    return {m: json.loads(r) for m, r in zip(models, raws, strict=True) if r is not None}


async def list_model_ids(redis: Redis, keys: Keys) -> list[str]:
    return sorted(_s(m) for m in await redis.smembers(keys.models()))


async def list_specs(redis: Redis, keys: Keys) -> list[dict[str, Any]]:
    ids = await list_model_ids(redis, keys)
    specs = await get_specs(redis, keys, ids)
    return [specs[m] for m in ids if m in specs]


async def delete_spec(redis: Redis, keys: Keys, model: str) -> bool:
    """Delete the spec and the model's state, history and seen ids; False if unknown."""
    removed = await redis.delete(keys.spec(model))
    await redis.delete(keys.state(model), keys.history(model), keys.seen(model))
    await redis.srem(keys.models(), model)
    return bool(removed)
