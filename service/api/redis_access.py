"""The API's Redis access: model specs, checkpoint reads, and predictions awaiting labels.

Keys come from ``service.store.keys``. The API never writes a model's state hash (the worker
owning the model's partition is its single writer); it only reads it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from redis.exceptions import NoScriptError

from clients.batch_answer import parse_prediction_id
from service.api.redis_pipe import RedisPipe
from service.store import registry
from service.store.checkpoints import RollbackRecord, read_version
from service.store.connect import RedisClient, as_text
from service.store.deadletters import read_deadletters, read_refused
from service.store.keys import Keys

COUNTERS = ("applied", "duplicate", "rejected")
_ROW = np.dtype("<f8")  # a stored prediction's x: float64, little-endian
STATUS_FIELDS = ("version", *COUNTERS)
# dropped batch ids kept per model (ZSET members of ~32 bytes: under 1 MB), so a label for one
# says "dropped"; a batch dropped before the last DROPPED_KEEP reads as unknown
DROPPED_KEEP = 10_000

# Claim a prediction for its label (docs/design.md, "Labels"). KEYS[1]: the prediction hash;
# ARGV: the label's y (JSON) and the request's Idempotency-Key ('' without one). nil when
# unknown/expired; else {state, x, hint, y, key, xf64} of the claim (x: the JSON of a record
# stored before xf64, else ''; xf64: x as little-endian float64 bytes, else ''): 'new'
# (claimed now, pending with ARGV's y and key), 'pending' (claimed earlier, its produce not
# known to be acked: the caller produces it again), 'done' (acked; '1' is the claim of an
# API before pending claims, which released a failed produce). One key, so it is also safe
# on Redis Cluster.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
local f = redis.call('HMGET', KEYS[1], 'labelled', 'x', 'hint', 'label_y', 'label_key', 'xf64')
if not f[1] then
  redis.call('HSET', KEYS[1], 'labelled', 'pending', 'label_y', ARGV[1], 'label_key', ARGV[2])
  return {'new', f[2] or '', f[3], ARGV[1], ARGV[2], f[6] or ''}
end
return {f[1], f[2] or '', f[3], f[4] or '', f[5] or '', f[6] or ''}
"""

# The claimed label's produce was acked. Never recreates an expired hash (no TTL then).
_LABEL_DONE = """
if redis.call('HEXISTS', KEYS[1], 'labelled') == 1 then
  redis.call('HSET', KEYS[1], 'labelled', 'done')
end
return 1
"""


# A predict request's rows stored for their labels as one record (docs/design.md, "Redis
# keys"): the hash ``n``, ``xf64`` (the n rows' float64 bytes, little-endian, one after the
# other), ``hf64`` (n float64 hints, NaN: none; absent when no row has one), ``v``, ``ts``,
# with a TTL. One record per batch, not one per row: Redis spent ~0.7 ms of CPU per batch of
# 100 on the per-row hashes (benchmarks/README.md, "Predict, batch of 100"). ARGV[3..7]: ts,
# n, the rows, the model's bound on stored rows, the hints (absent when none).
#
# Bounded per model (ONLINEPREDICT_MAX_PREDICTIONS rows): a new record joins the model's
# index (a sorted set: batch id, scored by the rows stored up to and including it), and the
# records whose rows all lie before the newest ``max`` are deleted, oldest first (so at most
# max + one batch's rows stay), their ids kept in the model's ring of dropped batches (the
# last DROPPED_KEEP), so a label for one is told "dropped" rather than "unknown". The write
# comes first: Redis checks memory at a script's first write only, so a full Redis refuses
# the whole script (nothing stored, nothing dropped); ``fresh``: the record is new (the
# route's rewrite of ``v`` is not counted twice). The index costs ~10-20 us of Redis CPU
# per predict (EVALSHA ~37 -> ~50-60 us for 100 rows of d = 20, noisy shared machine).
_STORE_BATCH = """
local function store(key, version, index, dropped, fresh)
  if ARGV[7] then
    redis.call('HSET', key, 'n', ARGV[4], 'xf64', ARGV[5], 'hf64', ARGV[7], 'v', version,
      'ts', ARGV[3])
  else
    redis.call('HSET', key, 'n', ARGV[4], 'xf64', ARGV[5], 'v', version, 'ts', ARGV[3])
  end
  redis.call('EXPIRE', key, ARGV[2])
  if not fresh then return end
  local last = redis.call('ZREVRANGE', index, 0, 0, 'WITHSCORES')
  local upto = (tonumber(last[2]) or 0) + tonumber(ARGV[4])
  local batch = string.match(key, '[^:]+$')
  redis.call('ZADD', index, upto, batch)
  redis.call('EXPIRE', index, ARGV[2])
  local cut = upto - tonumber(ARGV[6])
  if cut <= 0 then return end
  local old = redis.call('ZRANGEBYSCORE', index, '-inf', cut)
  if #old == 0 then return end
  local base = string.sub(key, 1, #key - #batch)
  for _, b in ipairs(old) do
    if redis.call('DEL', base .. b) == 1 then redis.call('ZADD', dropped, upto, b) end
  end
  redis.call('ZREMRANGEBYSCORE', index, '-inf', cut)
  redis.call('ZREMRANGEBYRANK', dropped, 0, -DROPPED_KEEP - 1)
  redis.call('EXPIRE', dropped, ARGV[2])
end
""".replace("DROPPED_KEEP", str(DROPPED_KEEP))

# The predict route's rewrite of ``v`` when the checkpoint moved during a request. KEYS: the
# batch record, the model's index and ring of dropped batches; ARGV: version, ttl, then as
# _STORE_BATCH.
_SAVE_PREDICTIONS = _STORE_BATCH + """
store(KEYS[1], ARGV[1], KEYS[2], KEYS[3], redis.call('EXISTS', KEYS[1]) == 0)
return 1
"""


# The predict hot path in one round trip: the spec's SHA-1 the API process has validated the
# request against (ARGV[1]), the checkpoint version and write token, and the batch stored with
# that version. KEYS: spec, state, then the batch record (all in the model's {id} slot); ARGV:
# spec sha1, ttl, then as _STORE_BATCH. Returns nil when the model does not exist (nothing
# stored), {version, token} when stored, {version, token, spec} when the stored spec is not
# the one the request was checked against (nothing stored: check again). The token names the
# state exactly: a Redis that lost writes hands the same version numbers out again.
_PREDICT = _STORE_BATCH + """
local spec = redis.call('GET', KEYS[1])
if not spec then return nil end
local head = redis.call('HMGET', KEYS[2], 'version', 'token')
local version, token = head[1] or '0', head[2] or ''
if redis.sha1hex(spec) ~= ARGV[1] then return {version, token, spec} end
store(KEYS[3], version, KEYS[4], KEYS[5], true)  -- a new batch id: a new record
return {version, token}
"""

# Claim row ARGV[1] of a batch record for its label: _CLAIM's protocol with the row's own
# fields ``l:<row>`` (state), ``y:<row>``, ``k:<row>`` in the batch's hash, so each row is
# labelled once, atomically, and the claims expire with the batch. ARGV: row, y (JSON),
# Idempotency-Key ('' without one). nil when the record is unknown/expired or has no such
# row; else {state, hint (8 bytes, or '' when the batch has no hints), y, key, x (the row's
# float64 bytes)}.
_CLAIM_ROW = """
local r = ARGV[1]
local f = redis.call('HMGET', KEYS[1], 'n', 'xf64', 'hf64', 'l:' .. r, 'y:' .. r, 'k:' .. r)
local n, i = tonumber(f[1]), tonumber(r)
if not n or i >= n then return nil end
local w = string.len(f[2]) / n
local x = string.sub(f[2], i * w + 1, (i + 1) * w)
local h = f[3] and string.sub(f[3], i * 8 + 1, i * 8 + 8) or ''
if not f[4] then
  redis.call('HSET', KEYS[1], 'l:' .. r, 'pending', 'y:' .. r, ARGV[2], 'k:' .. r, ARGV[3])
  return {'new', h, ARGV[2], ARGV[3], x}
end
return {f[4], h, f[5] or '', f[6] or '', x}
"""

# Row ARGV[1]'s claimed label was acked. Never recreates an expired record.
_ROW_DONE = """
local field = 'l:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], field) == 1 then
  redis.call('HSET', KEYS[1], field, 'done')
end
return 1
"""


def _batch_args(
    X: np.ndarray, hints: Sequence[float | None], max_rows: int
) -> list[str | bytes | int]:
    """_STORE_BATCH's ARGV[4..]: n, the rows' float64 bytes (one block), the model's bound on
    stored rows, the hints' block (NaN: none) unless no row has a hint."""
    n = X.shape[0]
    if len(hints) != n:
        raise ValueError(f"{n} rows and {len(hints)} hints")
    rows = np.ascontiguousarray(X, dtype=_ROW).tobytes()
    args: list[str | bytes | int] = [n, rows, max_rows]
    if hints.count(None) != n:
        args.append(np.array([math.nan if h is None else h for h in hints], _ROW).tobytes())
    return args


@dataclass(frozen=True)
class Claim:
    """A prediction's label claim: ``state`` 'new', 'pending' or 'done'; ``y_json`` and
    ``key`` are those of the first claim (empty for a claim made before pending claims)."""

    state: str
    x: list[float]
    hint: float | None
    y_json: str
    key: str


class RedisAccess:
    def __init__(
        self,
        redis: RedisClient,
        keys: Keys,
        pipe: RedisPipe | None = None,
        *,
        max_predictions: int = 1_000_000,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.pipe = pipe  # the predict hot path's pipelined connection, when the URL allows
        self.max_predictions = max_predictions  # rows stored per model (_STORE_BATCH)
        self._claim = redis.register_script(_CLAIM)
        self._label_done = redis.register_script(_LABEL_DONE)
        self._save_predictions = redis.register_script(_SAVE_PREDICTIONS)
        self._predict = redis.register_script(_PREDICT)
        self._claim_row = redis.register_script(_CLAIM_ROW)
        self._row_done = redis.register_script(_ROW_DONE)

    # ---- specs (service.store.registry) ---------------------------------------------------
    async def create_spec(self, spec: dict[str, Any], *, topic: str | None = None) -> bool:
        """Store a new spec (registered on its home partition of ``topic``); False when the
        id is taken."""
        return await registry.create_spec(self.redis, self.keys, spec, topic=topic)

    async def get_spec(self, model: str) -> dict[str, Any] | None:
        return await registry.get_spec(self.redis, self.keys, model)

    async def list_specs(self) -> list[dict[str, Any]]:
        return await registry.list_specs(self.redis, self.keys)

    async def delete_model(self, model: str, *, topic: str | None = None) -> bool:
        """Delete the spec, checkpoint, history, dedupe ids, pending predictions and the
        model's Idempotency-Key records, and take the model off its partitions'
        ``partition-models`` sets of ``topic``."""
        removed = await registry.delete_spec(self.redis, self.keys, model, topic=topic)
        for pattern in (
            self.keys.prediction(model, "*"),
            self.keys.predictions(model, "*"),
            self.keys.idempotency(model, "*"),
        ):
            batch: list[bytes] = []
            async for key in self.redis.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    await self.redis.delete(*batch)
                    batch = []
            if batch:
                await self.redis.delete(*batch)
        await self.redis.delete(self.keys.predictions_index(model), self.keys.dropped(model))
        await self.redis.delete(self.keys.deadletters(model), self.keys.refused(model))
        return removed

    # ---- checkpoints (read only) ---------------------------------------------------------
    async def version(self, model: str) -> int:
        return await read_version(self.redis, self.keys, model)

    async def head(self, model: str) -> tuple[int, str]:
        """The checkpoint's version and write token (``(0, "")`` without one)."""
        version, token = await self.redis.hmget(self.keys.state(model), ["version", "token"])
        return int(version or 0), as_text(token or b"")

    async def checkpoint(self, model: str) -> tuple[bytes | None, int, str]:
        """The state blob, its version and write token, read together (one atomic HMGET)."""
        blob, version, token = await self.redis.hmget(
            self.keys.state(model), ["state", "version", "token"]
        )
        # The pool is bytes-mode (decode_responses=False): the blob comes back as bytes.
        blob = blob.encode() if isinstance(blob, str) else blob
        return blob, int(version or 0), as_text(token or b"")

    async def status(self, model: str) -> dict[str, int | float | str | None]:
        return (await self.statuses([model]))[model]

    async def statuses(self, models: list[str]) -> dict[str, dict[str, int | float | str | None]]:
        """Per model: checkpoint version, event counters, ``updated_at`` (None before the
        first checkpoint) and ``halted`` (why it stopped learning, or None), read in one
        round trip whatever the number of models."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for m in models:
                pipe.hmget(self.keys.state(m), [*STATUS_FIELDS, "updated_at", "halted"])
                pipe.hvals(self.keys.rollbacks(m))  # ``discarded``: their sum
            replies = await pipe.execute()
        rows, listed = replies[0::2], replies[1::2]
        out: dict[str, dict[str, int | float | str | None]] = {}
        for m, row, done in zip(models, rows, listed, strict=True):
            status: dict[str, int | float | str | None] = {
                f: int(v or 0) for f, v in zip(STATUS_FIELDS, row, strict=False)
            }
            status["updated_at"] = float(row[-2]) if row[-2] else None
            halted = row[-1]
            status["halted"] = halted.decode() if isinstance(halted, bytes) else halted
            status["discarded"] = sum(RollbackRecord.from_json(v).discarded for v in done)
            out[m] = status
        return out

    async def model_ids(self) -> list[str]:
        return await registry.list_model_ids(self.redis, self.keys)

    async def deadletters(self) -> int:
        raw = await self.redis.get(self.keys.deadletter_count())
        return int(raw) if raw is not None else 0

    async def model_deadletters(self, model: str, limit: int) -> list[dict[str, Any]]:
        """The model's newest dead letters, newest first (service/store/deadletters.py)."""
        return await read_deadletters(self.redis, self.keys, model, limit)

    async def refused_shares(self, models: list[str]) -> dict[str, tuple[int, int]]:
        """Per model whose worker wrote one: its recent (events, refused)."""
        return await read_refused(self.redis, self.keys, models) if models else {}

    # ---- predictions awaiting labels -----------------------------------------------------
    async def save_predictions(
        self,
        model: str,
        batch: str,
        X: np.ndarray,
        hints: Sequence[float | None],
        version: int,
        ttl_s: int,
    ) -> None:
        """The batch's rows (``X``) and hints as one record (``n``, ``xf64``, ``hf64``,
        ``v``, ``ts``) with a TTL, for the labels of its predictions ``<batch>.<row>``."""
        keys = self._batch_keys(model, batch)
        args = [version, ttl_s, repr(time.time()), *_batch_args(X, hints, self.max_predictions)]
        await self._save_predictions(keys=keys, args=args)

    def _batch_keys(self, model: str, batch: str) -> list[str]:
        """_STORE_BATCH's keys: the batch record, the model's index and dropped ring."""
        k = self.keys
        return [k.predictions(model, batch), k.predictions_index(model), k.dropped(model)]

    async def was_dropped(self, model: str, prediction_id: str) -> bool:
        """Whether the prediction's batch was dropped for the model's bound on stored rows
        (among the last ``DROPPED_KEEP`` dropped batches), not unknown or expired."""
        in_batch = parse_prediction_id(prediction_id)
        if in_batch is None:
            return False
        return await self.redis.zscore(self.keys.dropped(model), in_batch[0]) is not None

    async def store_checked_predictions(
        self,
        model: str,
        spec_sha1: str,
        batch: str,
        X: np.ndarray | None,
        hints: Sequence[float | None],
        ttl_s: int,
    ) -> tuple[int, str, bytes | None] | None:
        """The predict hot path's one round trip: store the batch (as ``save_predictions``)
        with the current checkpoint version, provided the stored spec's SHA-1 is
        ``spec_sha1`` (and ``X``, the rows, is given with it).

        None: no such model (nothing stored). ``(version, token, None)``: stored with ``v =
        version``; ``token`` is that checkpoint's write token. ``(version, token, spec)``:
        the stored spec is another one (or ``spec_sha1`` is empty), nothing stored; here are
        its bytes to check the request against."""
        keys = [self.keys.spec(model), self.keys.state(model)]
        args: list[str | bytes | int] = [spec_sha1, ttl_s, repr(time.time())]
        if spec_sha1:
            assert X is not None
            keys += self._batch_keys(model, batch)
            args += _batch_args(X, hints, self.max_predictions)
        call = self.pipe.call if self.pipe is not None else self.redis.execute_command
        try:
            # EVALSHA directly: redis-py's Script wrapper and pooled client cost several
            # times the command's own CPU (see service.api.redis_pipe).
            res = await call("EVALSHA", self._predict.sha, len(keys), *keys, *args)
        except NoScriptError:  # a restarted or flushed Redis: the wrapper loads it again
            res = await self._predict(keys=keys, args=args)
        if res is None:
            return None
        return int(res[0]), as_text(res[1]), (res[2] if len(res) > 2 else None)

    async def claim_prediction(
        self, model: str, prediction_id: str, y_json: str, idempotency_key: str | None
    ) -> Claim | None:
        """Claim a prediction for the label ``y_json`` (pending until ``label_done``), or
        read the earlier claim; None when the prediction is unknown or expired. An id
        ``<batch>.<row>`` is a row of a batch record; any other, a per-row record written
        before batch records (a rolling upgrade)."""
        in_batch = parse_prediction_id(prediction_id)
        if in_batch is not None:
            batch, row = in_batch
            got = await self._claim_row(
                keys=[self.keys.predictions(model, batch)],
                args=[row, y_json, idempotency_key or ""],
            )
            if got is None:
                return None
            state, y, key = (as_text(v) for v in (got[0], got[2], got[3]))
            hint = np.frombuffer(got[1], dtype=_ROW).tolist()[0] if got[1] else math.nan
            row_x = np.frombuffer(got[4], dtype=_ROW).tolist()
            return Claim(state, row_x, None if hint != hint else hint, y, key)  # NaN: none
        res = await self._claim(
            keys=[self.keys.prediction(model, prediction_id)], args=[y_json, idempotency_key or ""]
        )
        if res is None:
            return None
        state, x, hint, y, key = (as_text(v) for v in res[:5])
        if state == "1":  # an earlier API's claim: produced, or released when it failed
            state = "done"
        # xf64: the row's float64 bytes; x: the JSON of a record stored before xf64 existed
        row = np.frombuffer(res[5], dtype=_ROW).tolist() if not x else json.loads(x)
        return Claim(state=state, x=row, hint=json.loads(hint), y_json=y, key=key)

    async def label_done(self, model: str, prediction_id: str) -> None:
        """The claimed label's event was acked by the broker: later labels are duplicates."""
        in_batch = parse_prediction_id(prediction_id)
        if in_batch is not None:
            batch, row = in_batch
            await self._row_done(keys=[self.keys.predictions(model, batch)], args=[row])
            return
        await self._label_done(keys=[self.keys.prediction(model, prediction_id)])

    # ---- Idempotency-Key --------------------------------------------------------------------
    async def remember_request(
        self, model: str, key_digest: str, fingerprint: str, ttl_s: int
    ) -> bool:
        """Record the fingerprint of the first request with this key; False when the key
        came with another fingerprint before. The record is never changed, only expires, so
        SET NX then GET needs no script."""
        name = self.keys.idempotency(model, key_digest)
        if await self.redis.set(name, fingerprint, nx=True, ex=ttl_s):
            return True
        first = await self.redis.get(name)
        if isinstance(first, bytes):
            first = first.decode()
        return first is None or first == fingerprint  # None: expired in between
