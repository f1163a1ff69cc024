"""The API's Redis access: model specs, checkpoint reads, and predictions awaiting labels.

Keys come from ``service.store.keys``. The API never writes a model's state hash (the worker
owning the model's partition is its single writer); it only reads it.
"""

from __future__ import annotations

import json
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

from service.store import registry
from service.store.checkpoints import read_version
from service.store.keys import Keys

COUNTERS = ("applied", "duplicate", "rejected")

# Claim a prediction for its label atomically: nil when unknown/expired, {0} when it was
# labelled before, else {1, x, hint}. One key, so it is also safe on Redis Cluster.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
if redis.call('HSETNX', KEYS[1], 'labelled', ARGV[1]) == 0 then return {0} end
return {1, redis.call('HGET', KEYS[1], 'x'), redis.call('HGET', KEYS[1], 'hint')}
"""


# The predict hot path reads the spec and the checkpoint version in one round trip; false
# becomes nil when a key is missing. Both keys share the model's {id} slot.
_SPEC_AND_VERSION = """
return {redis.call('GET', KEYS[1]), redis.call('HGET', KEYS[2], 'version')}
"""
#: (model, version) read together with the spec by the current request (each request runs
#: in its own task, hence its own context); ``ApiStore.version`` consumes it once.
_request_version: ContextVar[tuple[str, int] | None] = ContextVar("version", default=None)

# The predict hot path stores a batch with one command (a pipeline of 2 commands per row
# costs far more client CPU). KEYS: prediction keys (one model, one slot); ARGV: ttl,
# version, ts, then x and hint per key.
_SAVE_PREDICTIONS = """
for i, key in ipairs(KEYS) do
  redis.call('HSET', key, 'x', ARGV[2 + 2 * i], 'hint', ARGV[3 + 2 * i], 'v', ARGV[2],
    'ts', ARGV[3])
  redis.call('EXPIRE', key, ARGV[1])
end
return #KEYS
"""


def _rows_json(rows: list[list[float]]) -> list[str]:
    """``[json.dumps(row) for row in rows]`` with one encoder call: float formatting
    dominates a batch, and one call saves the per-call overhead (rows of numbers contain no
    brackets, so splitting the encoded list on its row separators is exact)."""
    text = json.dumps(rows)
    return ["[" + part + "]" for part in text[2:-2].split("], [")]


@dataclass(frozen=True)
class Claim:
    duplicate: bool
    x: list[float] | None = None
    hint: float | None = None


class ApiStore:
    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._claim = redis.register_script(_CLAIM)
        self._spec_and_version = redis.register_script(_SPEC_AND_VERSION)
        self._save_predictions = redis.register_script(_SAVE_PREDICTIONS)

    # ---- specs (service.store.registry) ---------------------------------------------------
    async def create_spec(self, spec: dict[str, Any]) -> bool:
        """Store a new spec; False when the id is taken."""
        return await registry.create_spec(self.redis, self.keys, spec)

    async def get_spec(self, model: str) -> dict[str, Any] | None:
        return await registry.get_spec(self.redis, self.keys, model)

    async def list_specs(self) -> list[dict[str, Any]]:
        return await registry.list_specs(self.redis, self.keys)

    async def delete_model(self, model: str) -> bool:
        """Delete the spec, checkpoint, history, dedupe ids and pending predictions."""
        removed = await registry.delete_spec(self.redis, self.keys, model)
        batch: list[bytes] = []
        async for key in self.redis.scan_iter(match=self.keys.prediction(model, "*"), count=1000):
            batch.append(key)
            if len(batch) >= 500:
                await self.redis.delete(*batch)
                batch = []
        if batch:
            await self.redis.delete(*batch)
        return removed

    # ---- checkpoints (read only) ---------------------------------------------------------
    async def version(self, model: str) -> int:
        known = _request_version.get()
        if known is not None and known[0] == model:
            _request_version.set(None)  # once: a later read in this request asks Redis
            return known[1]
        return await read_version(self.redis, self.keys, model)

    async def raw_spec(self, model: str) -> bytes | None:
        """The stored spec JSON, unparsed (None: unknown model; see ``serving.parse_spec``),
        read in one round trip with the checkpoint version, which the next ``version(model)``
        call of the same request returns without asking Redis again."""
        raw, version = await self._spec_and_version(
            keys=[self.keys.spec(model), self.keys.state(model)]
        )
        _request_version.set((model, int(version or 0)))
        return raw  # type: ignore[no-any-return]

    async def checkpoint(self, model: str) -> tuple[bytes | None, int]:
        """The state blob and its version, read together (one atomic HMGET)."""
        blob, version = await self.redis.hmget(self.keys.state(model), ["state", "version"])
        # The pool is bytes-mode (decode_responses=False): the blob comes back as bytes.
        return (blob.encode() if isinstance(blob, str) else blob), int(version or 0)

    async def status(self, model: str) -> dict[str, int]:
        fields = ["version", *COUNTERS]
        values = await self.redis.hmget(self.keys.state(model), fields)
        return {f: int(v) if v is not None else 0 for f, v in zip(fields, values, strict=True)}

    async def counters_and_stats(
        self, models: list[str]
    ) -> dict[str, tuple[dict[str, int], bytes | None]]:
        """Per model: the event counters and the running-statistics blob (not the state)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for m in models:
                pipe.hmget(self.keys.state(m), [*COUNTERS, "stats"])
            rows = await pipe.execute()
        out = {}
        for m, row in zip(models, rows, strict=True):
            counts = {c: int(v or 0) for c, v in zip(COUNTERS, row, strict=False)}
            out[m] = (counts, row[-1] or None)
        return out

    async def model_ids(self) -> list[str]:
        return await registry.list_model_ids(self.redis, self.keys)

    async def deadletters(self) -> int:
        raw = await self.redis.get(self.keys.deadletter_count())
        return int(raw) if raw is not None else 0

    # ---- predictions awaiting labels -----------------------------------------------------
    async def save_predictions(
        self,
        model: str,
        rows: list[tuple[str, list[float], float | None]],
        version: int,
        ttl_s: int,
    ) -> None:
        """Each row as the hash ``x``, ``hint``, ``v`` (version), ``ts`` with a TTL: one
        script call for the whole batch."""
        keys = [self.keys.prediction(model, pid) for pid, _, _ in rows]
        args: list[str | int] = [ttl_s, version, repr(time.time())]
        for x_json, (_, _, hint) in zip(_rows_json([x for _, x, _ in rows]), rows, strict=True):
            args += [x_json, json.dumps(hint)]
        await self._save_predictions(keys=keys, args=args)

    async def claim_prediction(self, model: str, prediction_id: str) -> Claim | None:
        """Mark a prediction as labelled; None when unknown or expired."""
        res = await self._claim(keys=[self.keys.prediction(model, prediction_id)], args=[1])
        if res is None:
            return None
        if int(res[0]) == 0:
            return Claim(duplicate=True)
        return Claim(duplicate=False, x=json.loads(res[1]), hint=json.loads(res[2]))

    async def release_prediction(self, model: str, prediction_id: str) -> None:
        """Undo a claim whose joined event could not be produced, so the label can be resent."""
        await self.redis.hdel(self.keys.prediction(model, prediction_id), "labelled")
