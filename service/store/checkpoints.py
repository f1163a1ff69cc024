"""Offset-stamped learner state in Redis (docs/design.md, "Checkpoints").

All functions take a ``redis.asyncio.Redis`` or ``RedisCluster`` (``service.store.connect``)
created with ``decode_responses=False`` (state blobs are binary) and a
:class:`~service.store.keys.Keys`.

One model's checkpoint is written by one Lua script (atomic, single hash slot thanks to the
``{id}`` hash tag), which

1. checks the version the writer loaded and the write ``token`` that came with it
   (compare-and-set: a worker that lost the model, or a rollback in between, makes the
   write fail with ``CONFLICT`` instead of clobbering; the token, random per write, tells
   apart two writes that Redis numbered alike after losing writes, which the version alone
   cannot: docs/reliability.md, "Ordinary operations"),
   and the incarnation it loaded against the spec's (a model deleted, or deleted and
   re-created with the same id, makes the write fail with ``CONFLICT`` too, even when both
   incarnations are at version 0; docs/reliability.md, "Re-creating a model");
2. refuses a stamp that goes backwards on the same partition (``BACKWARDS``), unless the
   writer declares the old stamp void (the log was reset: ``rewind=True``);
3. writes the hash fields (see ``keys.py``): ``state``, ``version`` + 1, the stamp
   ``partition``/``offset``/``event_id``, the counters ``applied``/``duplicate``/
   ``rejected``, ``ids_sum`` (sum mod 2**64 of :func:`id_hash` over applied ids, an
   order-independent exactly-once witness), ``stats`` (codec blob of the running metrics),
   ``worker``, ``updated_at``, ``token`` (this write's), ``figures`` (JSON of the figures
   read at this write, for readers that must not decode ``stats``) and ``barrier``
   (``partition:offset:event_id`` of the last rollback control event decided, or empty;
   see ``docs/checkpoints.md``), and clears
   ``halted`` (why the model had stopped learning; service/worker/divergence.py);
4. pushes the state onto ``history`` (last K versions): a JSON head (version, stamp, ts,
   counters, ``slen`` = length of the state blob), a newline, the state blob, then the
   stats blob, so a rollback restores state, running metrics and counters together;
5. stores the seen window (``seen``: one blob of id digests and their ``applied`` counts,
   layout in ``service/store/seen.py``) so dedupe by id survives restarts: it appends the
   records of the ids applied since the last write (trimming to the newest N once the
   blob holds N + N/4), or, after a rollback or a migration, replaces the blob with the
   writer's whole window. A ``seen`` key still in the old layout (a sorted set of ids)
   makes an append fail with ``CONFLICT``: the writer reloads the model, which reads the
   old layout, and its next write replaces it;
6. lists an undoing rollback decided since the last write (``rollbacks``, a
   :class:`RollbackRecord` by its event id, the last ``ROLLBACKS_KEEP``), in the same
   script as the state that holds it: a Redis that loses writes loses both or neither.

:func:`write_checkpoints` pipelines the scripts of many models (after the
``partition-models`` set additions, so a model is always registered on its partition
before its first stamp exists).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from redis.exceptions import ResponseError

from service.store import seen as seen_layout
from service.store.connect import RedisClient, as_text, queue_script
from service.store.keys import Keys
from service.store.seen import SeenRecords

OK, CONFLICT, BACKWARDS = "ok", "conflict", "backwards"
_MASK64 = (1 << 64) - 1

_WRITE_LUA = """
local cur = redis.call('HMGET', KEYS[1], 'version', 'partition', 'offset', 'token')
local ver = tonumber(cur[1]) or 0
if ver ~= tonumber(ARGV[1]) or (cur[4] or '') ~= ARGV[20] then return {-1, ver} end
local seen_type = redis.call('TYPE', KEYS[3])['ok']
if ARGV[17] ~= 'w' and seen_type ~= 'none' and seen_type ~= 'string' then
  return {-1, ver}
end
local spec = redis.call('GET', KEYS[4])
local inc = ''
if spec then
  local ok, decoded = pcall(cjson.decode, spec)
  if ok and type(decoded) == 'table' and type(decoded['incarnation']) == 'string' then
    inc = decoded['incarnation']
  end
elseif ARGV[18] ~= '' then
  return {-1, ver}
end
if inc ~= ARGV[18] then return {-1, ver} end
if ARGV[2] ~= '1' and cur[2] and tonumber(cur[2]) == tonumber(ARGV[3])
   and tonumber(cur[3]) > tonumber(ARGV[4]) then
  return {-2, ver}
end
local nv = ver + 1
redis.call('HSET', KEYS[1], 'state', ARGV[6], 'version', nv, 'partition', ARGV[3],
  'offset', ARGV[4], 'event_id', ARGV[5], 'applied', ARGV[7], 'duplicate', ARGV[8],
  'rejected', ARGV[9], 'ids_sum', ARGV[10], 'stats', ARGV[11], 'worker', ARGV[14],
  'updated_at', ARGV[15], 'barrier', ARGV[16], 'token', ARGV[19], 'figures', ARGV[21])
redis.call('HDEL', KEYS[1], 'halted')
local hkeep = tonumber(ARGV[12])
if hkeep > 0 then
  local head = cjson.encode({version=nv, partition=tonumber(ARGV[3]),
    offset=tonumber(ARGV[4]), event_id=ARGV[5], ts=tonumber(ARGV[15]),
    applied=tonumber(ARGV[7]), duplicate=tonumber(ARGV[8]), rejected=tonumber(ARGV[9]),
    ids_sum=ARGV[10], slen=string.len(ARGV[6])})
  redis.call('LPUSH', KEYS[2], head .. '\\n' .. ARGV[6] .. ARGV[11])
  redis.call('LTRIM', KEYS[2], 0, hkeep - 1)
end
if ARGV[25] ~= '' then
  redis.call('HSET', KEYS[5], ARGV[25], ARGV[26])
  if redis.call('HLEN', KEYS[5]) > tonumber(ARGV[27]) then
    local oldest, low = nil, nil
    for _, v in ipairs(redis.call('HVALS', KEYS[5])) do
      local r = cjson.decode(v)
      if low == nil or r['offset'] < low then oldest, low = r['event_id'], r['offset'] end
    end
    redis.call('HDEL', KEYS[5], oldest)
  end
end
local skeep = tonumber(ARGV[13])
if ARGV[17] == 'w' then
  redis.call('DEL', KEYS[3])
  if skeep > 0 then redis.call('SET', KEYS[3], ARGV[22]) end
elseif skeep > 0 and ARGV[22] ~= '' then
  if seen_type == 'none' then redis.call('SET', KEYS[3], ARGV[23]) end
  local len = redis.call('APPEND', KEYS[3], ARGV[22])
  local hlen, rlen = string.len(ARGV[23]), tonumber(ARGV[24])
  if (len - hlen) / rlen > skeep + math.floor(skeep / 4) then
    local tail = redis.call('GETRANGE', KEYS[3], len - skeep * rlen, -1)
    redis.call('SET', KEYS[3], ARGV[23] .. tail)
  end
end
return {nv, ver}
"""

_ROLLBACK_LUA = """
local items = redis.call('LRANGE', KEYS[2], 0, -1)
for _, item in ipairs(items) do
  local nl = string.find(item, '\\n', 1, true)
  local head = cjson.decode(string.sub(item, 1, nl - 1))
  if tonumber(head['version']) == tonumber(ARGV[1]) then
    local last = -1
    if head['slen'] then last = nl + tonumber(head['slen']) end
    local nv = redis.call('HINCRBY', KEYS[1], 'version', 1)
    redis.call('HSET', KEYS[1], 'state', string.sub(item, nl + 1, last), 'updated_at', ARGV[2],
      'token', ARGV[3])
    return nv
  end
end
return -1
"""


def new_token() -> str:
    """A write token: random, so no two writes share one (Redis may number them alike)."""
    return os.urandom(8).hex()


id_hash = seen_layout.id_hash  # where the checkpoint code and its callers have found it


def ids_sum(event_ids: Iterable[str]) -> int:
    """The ``ids_sum`` a model has after applying exactly these ids once each."""
    total = 0
    for event_id in event_ids:
        total = (total + id_hash(event_id)) & _MASK64
    return total


@dataclass(frozen=True)
class Stamp:
    """Partition, offset and event id of the last event a state covers."""

    partition: int
    offset: int
    event_id: str


@dataclass
class Counters:
    """Cumulative per-model event counts by outcome, plus the applied-ids witness."""

    applied: int = 0
    duplicate: int = 0
    rejected: int = 0
    ids_sum: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"applied": self.applied, "duplicate": self.duplicate, "rejected": self.rejected}


ROLLBACKS_KEEP = 100  # rollback records kept per model (the oldest by offset go first)


@dataclass(frozen=True)
class RollbackRecord:
    """An applied rollback that discarded or skipped events (docs/checkpoints.md): the
    version restored, the rollback event's id and position, and with ``discard_after`` the
    offsets ``(after, upto]`` of the events never learned, ``discarded`` of them applied
    before and undone; ``skip_ids``: the ids it named, never learned."""

    event_id: str
    version: int
    partition: int
    offset: int
    discard_after: bool
    after: int  # the restored version's stamp offset
    discarded: int
    skip_ids: tuple[str, ...] = ()
    ts: float = 0.0

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "skip_ids": list(self.skip_ids)}, sort_keys=True)

    @classmethod
    def from_json(cls, raw: Any) -> RollbackRecord:
        d = json.loads(raw)
        return cls(**{**d, "skip_ids": tuple(d.get("skip_ids", ()))})


@dataclass
class CheckpointWrite:
    """One model's checkpoint. ``expected_version`` is the version the writer loaded
    (0 when the model had no state)."""

    model: str
    topic: str
    stamp: Stamp
    state: bytes
    counters: Counters
    expected_version: int
    stats: bytes = b""
    # the seen window (service/store/seen.py): records of the ids applied since the last
    # write, appended; or with ``seen_whole``, the whole blob, replacing the stored one
    seen: bytes = b""
    seen_whole: bool = False
    rewind: bool = False
    barrier: Stamp | None = None  # the last rollback control event decided
    incarnation: str = ""  # the spec's; "" for a spec made before incarnations
    token: str = ""  # this write's random token (stored with it)
    expected_token: str = ""  # the token of the version the writer loaded ("" for none)
    figures: bytes = b""  # the figures read at this write, JSON (service/metrics/figures.py)
    # an undoing rollback decided since the last write: listed in the same script as the
    # state that holds it, so one is never stored without the other (docs/checkpoints.md)
    rollback: RollbackRecord | None = None


@dataclass(frozen=True)
class WriteResult:
    model: str
    outcome: str  # OK, CONFLICT or BACKWARDS
    version: int  # the new version on OK, the stored one otherwise


@dataclass
class StoredState:
    """What ``model:{id}:state`` holds."""

    model: str
    state: bytes
    version: int
    stamp: Stamp | None
    counters: Counters
    stats: bytes | None = None
    worker: str = ""
    updated_at: float = 0.0
    barrier: Stamp | None = None
    token: str = ""  # the random token of the write that made this version


@dataclass(frozen=True)
class HistoryEntry:
    """One kept checkpoint. ``counters`` and ``stats`` are None in entries written before
    they were recorded in the history (such versions cannot be rolled back to)."""

    version: int
    stamp: Stamp
    ts: float
    state: bytes = field(repr=False)
    counters: Counters | None = None
    stats: bytes | None = field(default=None, repr=False)


def _encode_barrier(barrier: Stamp | None) -> str:
    return "" if barrier is None else f"{barrier.partition}:{barrier.offset}:{barrier.event_id}"


def _decode_barrier(raw: Any) -> Stamp | None:
    text = as_text(raw) if raw is not None else ""
    if not text:
        return None
    partition, offset, event_id = text.split(":", 2)
    return Stamp(int(partition), int(offset), event_id)


def _parse_state(model: str, raw: dict[Any, Any]) -> StoredState | None:
    h = {as_text(k): v for k, v in raw.items()}
    if "version" not in h:
        return None
    stamp = None
    if h.get("partition") not in (None, b"", ""):
        stamp = Stamp(int(h["partition"]), int(h["offset"]), as_text(h.get("event_id", b"")))
    blob = h.get("state", b"")
    stats = h.get("stats")
    return StoredState(
        model=model,
        state=blob if isinstance(blob, bytes) else blob.encode("latin-1"),
        version=int(h["version"]),
        stamp=stamp,
        counters=Counters(
            applied=int(h.get("applied", 0)),
            duplicate=int(h.get("duplicate", 0)),
            rejected=int(h.get("rejected", 0)),
            ids_sum=int(h.get("ids_sum", 0)),
        ),
        stats=stats if stats else None,
        worker=as_text(h.get("worker", b"")),
        updated_at=float(h.get("updated_at", 0.0) or 0.0),
        barrier=_decode_barrier(h.get("barrier")),
        token=as_text(h.get("token", b"")),
    )


async def read_state(redis: RedisClient, keys: Keys, model: str) -> StoredState | None:
    """The model's latest checkpoint, or None when it has none yet."""
    return _parse_state(model, await redis.hgetall(keys.state(model)))


async def read_states(
    redis: RedisClient, keys: Keys, models: Sequence[str]
) -> dict[str, StoredState | None]:
    """Latest checkpoints of many models, pipelined."""
    async with redis.pipeline(transaction=False) as pipe:
        for model in models:
            pipe.hgetall(keys.state(model))
        raws = await pipe.execute()
    return {m: _parse_state(m, raw) for m, raw in zip(models, raws, strict=True)}


async def read_heads(
    redis: RedisClient, keys: Keys, models: Sequence[str]
) -> dict[str, tuple[int, str]]:
    """Each model's version and write token (``(0, "")`` without a state), pipelined."""
    async with redis.pipeline(transaction=False) as pipe:
        for model in models:
            pipe.hmget(keys.state(model), "version", "token")
        raws = await pipe.execute()
    return {
        m: (int(v), as_text(t) if t is not None else "") if v is not None else (0, "")
        for m, (v, t) in zip(models, raws, strict=True)
    }


async def read_version(redis: RedisClient, keys: Keys, model: str) -> int:
    """The model's state version (0 when no checkpoint): cheap cache-validity check."""
    raw = await redis.hget(keys.state(model), "version")
    return int(raw) if raw is not None else 0


def _is_wrongtype(reply: Any) -> bool:
    return isinstance(reply, ResponseError) and str(reply).startswith("WRONGTYPE")


async def read_seens(
    redis: RedisClient, keys: Keys, models: Sequence[str], keep: int
) -> dict[str, SeenRecords]:
    """The models' seen windows (the newest ``keep`` ids), pipelined; a window still in
    the old layout (a sorted set of ids) is read too, and marked ``legacy``."""
    if not models:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        for model in models:
            pipe.get(keys.seen(model))
        raws = await pipe.execute(raise_on_error=False)
    out: dict[str, SeenRecords] = {}
    for m, raw in zip(models, raws, strict=True):
        if _is_wrongtype(raw):
            scored = cast(
                "list[tuple[Any, float]]",
                await redis.zrange(keys.seen(m), 0, -1, withscores=True),
            )
            out[m] = seen_layout.from_ids([(as_text(i), s) for i, s in scored]).newest(keep)
        elif isinstance(raw, Exception):
            raise raw
        else:
            out[m] = seen_layout.decode(raw).newest(keep) if raw else SeenRecords()
    return out


async def read_seen(redis: RedisClient, keys: Keys, model: str, keep: int) -> SeenRecords:
    """The model's seen window: digests and applied counts of its newest ``keep`` ids."""
    return (await read_seens(redis, keys, [model], keep))[model]


async def read_seen_upto(
    redis: RedisClient, keys: Keys, model: str, max_applied: int, keep: int
) -> SeenRecords:
    """The seen window's ids applied at most at count ``max_applied``, oldest first: the
    dedupe window of a version whose ``applied`` counter was ``max_applied``."""
    return (await read_seen(redis, keys, model, keep)).upto(max_applied)


def _parse_history_item(item: Any) -> HistoryEntry:
    raw = item if isinstance(item, bytes) else str(item).encode("latin-1")
    head_raw, _, blob = raw.partition(b"\n")
    head = json.loads(head_raw)
    stamp = Stamp(int(head["partition"]), int(head["offset"]), str(head["event_id"]))
    counters, stats = None, None
    if "slen" in head:  # entries that carry counters and the stats blob
        n = int(head["slen"])
        blob, stats = blob[:n], blob[n:] or None
        counters = Counters(
            applied=int(head["applied"]),
            duplicate=int(head["duplicate"]),
            rejected=int(head["rejected"]),
            ids_sum=int(head["ids_sum"]),
        )
    return HistoryEntry(int(head["version"]), stamp, float(head["ts"]), blob, counters, stats)


async def read_history(redis: RedisClient, keys: Keys, model: str) -> list[HistoryEntry]:
    """The model's last K checkpoints, newest first."""
    return [_parse_history_item(i) for i in await redis.lrange(keys.history(model), 0, -1)]


async def read_history_entry(
    redis: RedisClient, keys: Keys, model: str, version: int
) -> HistoryEntry | None:
    """History entry ``version`` of the model, or None when it is no longer kept."""
    for entry in await read_history(redis, keys, model):
        if entry.version == version:
            return entry
    return None


async def rollback(redis: RedisClient, keys: Keys, model: str, version: int) -> int:
    """Offline primitive: make history entry ``version``'s state blob the current state (as
    a new version) while the stamp, counters and seen ids stay, so no event is replayed.

    This is NOT the service's rollback (``POST /v1/models/{id}/rollback``), which restores
    the state *and its offset* through a ``rollback`` control event applied by the owning
    worker in log order (``docs/checkpoints.md``). Use this only on a model no worker owns;
    an owner's next write would fail its version check and reload this state. Returns the
    new version; ``KeyError`` if that version is no longer in the history."""
    script = redis.register_script(_ROLLBACK_LUA)
    nv = int(
        await script(
            keys=[keys.state(model), keys.history(model)],
            args=[version, time.time(), new_token()],
        )
    )
    if nv < 0:
        raise KeyError(f"model {model!r}: version {version} is not in the history")
    return nv


async def read_rollbacks(redis: RedisClient, keys: Keys, model: str) -> list[RollbackRecord]:
    """The model's rollback records, newest (highest offset) first."""
    raw = await redis.hvals(keys.rollbacks(model))
    return sorted(
        (RollbackRecord.from_json(v) for v in raw),
        key=lambda r: (r.offset, r.event_id),
        reverse=True,
    )


async def partition_models(redis: RedisClient, keys: Keys, topic: str, partition: int) -> set[str]:
    return {as_text(m) for m in await redis.smembers(keys.partition_models(topic, partition))}


async def forget_partition_model(
    redis: RedisClient, keys: Keys, topic: str, partition: int, model: str
) -> None:
    await redis.srem(keys.partition_models(topic, partition), model)


async def write_checkpoints(
    redis: RedisClient,
    keys: Keys,
    writes: Sequence[CheckpointWrite],
    *,
    history_keep: int = 10,
    seen_keep: int = 10_000,
    worker: str = "",
    extra: Callable[[Any], object] | None = None,
) -> list[WriteResult]:
    """Write many models' checkpoints in one pipeline; each model atomically.

    Step 1: register every model on its partition (``partition-models``); step 2: one
    script per model (see the module docstring); step 3: ``extra(pipe)`` may queue more
    commands (the worker's own counters), so they cost no round trip of their own.
    Returns one result per write, in order; a ``CONFLICT`` or ``BACKWARDS`` write
    changed nothing for that model.
    """
    if not writes and extra is None:
        return []
    script = redis.register_script(_WRITE_LUA)
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        by_partition: dict[tuple[str, int], list[str]] = {}
        for w in writes:
            by_partition.setdefault((w.topic, w.stamp.partition), []).append(w.model)
        for (topic, partition), models in by_partition.items():
            pipe.sadd(keys.partition_models(topic, partition), *models)
        for w in writes:
            args = [
                w.expected_version,
                "1" if w.rewind else "0",
                w.stamp.partition,
                w.stamp.offset,
                w.stamp.event_id,
                w.state,
                w.counters.applied,
                w.counters.duplicate,
                w.counters.rejected,
                w.counters.ids_sum,
                w.stats,
                history_keep,
                seen_keep,
                worker,
                now,
                _encode_barrier(w.barrier),
                "w" if w.seen_whole else "a",
                w.incarnation,
                w.token,
                w.expected_token,
                w.figures,
                w.seen,
                seen_layout.HEADER,
                seen_layout.RECORD.itemsize,
                w.rollback.event_id if w.rollback is not None else "",
                w.rollback.to_json() if w.rollback is not None else "",
                ROLLBACKS_KEEP,
            ]
            km = [
                keys.state(w.model),
                keys.history(w.model),
                keys.seen(w.model),
                keys.spec(w.model),
                keys.rollbacks(w.model),
            ]
            await queue_script(pipe, script, km, args)
        if extra is not None:
            extra(pipe)
        replies = await pipe.execute()
    results = []
    first = len(by_partition)
    for w, (code, ver) in zip(writes, replies[first : first + len(writes)], strict=True):
        code, ver = int(code), int(ver)
        if code == -1:
            results.append(WriteResult(w.model, CONFLICT, ver))
        elif code == -2:
            results.append(WriteResult(w.model, BACKWARDS, ver))
        else:
            results.append(WriteResult(w.model, OK, code))
    return results
