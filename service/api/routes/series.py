"""A model's recent figures over time (the dashboard's history), sampled by the API
(``service/api/series.py``) into a capped Redis list (``service/store/series.py``), and on
request the kept checkpoints' own figures (``checkpoints=true``): a model fed in one burst
passes through several versions between two samples, which only its history holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Annotated

from fastapi import APIRouter, Query

from learners.codec import StateCodecError, decode_state
from service.api.deps import ModelDep, SettingsDep, StoreDep
from service.api.routes._common import errors
from service.api.schemas import SeriesOut, SeriesPointOut
from service.api.security import ReadKey
from service.metrics.running import RunningStats
from service.store.connect import RedisClient
from service.store.keys import Keys
from service.store.series import SeriesPoint, pick_values, read_series

router = APIRouter(prefix="/v1/models", tags=["models"])

MAX_LIMIT = 10_000  # the largest ONLINEPREDICT_SERIES_POINTS

Limit = Annotated[
    int | None,
    Query(ge=1, le=MAX_LIMIT, description="Only the last this many points (default: all kept)."),
]
Since = Annotated[
    float | None,
    Query(ge=0, allow_inf_nan=False, description="Only points sampled after this Unix time."),
]
WithCheckpoints = Annotated[
    bool,
    Query(
        description="Also a point per kept checkpoint version (ONLINEPREDICT_HISTORY_KEEP,"
        " 10) the sampler missed, at the checkpoint's write time, figures from its statistics."
    ),
]


@router.get(
    "/{model_id}/series",
    response_model=SeriesOut,
    dependencies=[ReadKey],
    responses=errors(401, 404, 422, 503),
)
async def model_series(
    model: ModelDep,
    settings: SettingsDep,
    store: StoreDep,
    limit: Limit = None,
    since: Since = None,
    checkpoints: WithCheckpoints = False,
) -> SeriesOut:
    """The model's sampled figures, oldest first: at most one point every
    ``ONLINEPREDICT_SERIES_INTERVAL_S`` (5 s) when its checkpoint changed, the last
    ``ONLINEPREDICT_SERIES_POINTS`` (720) kept. Empty before the first checkpoint. With
    ``checkpoints=true``, the kept checkpoint versions not sampled are merged in, by version."""
    points = await read_series(
        store.redis, store.keys, model.id, limit=None if checkpoints else limit, since=since
    )
    if checkpoints:
        points = await _with_checkpoints(store.redis, store.keys, model.id, points, since)
        points = points[-limit:] if limit is not None else points
    return SeriesOut(
        model=model.id,
        interval_s=settings.series_interval_s,
        capacity=settings.series_points,
        points=[
            SeriesPointOut(
                ts=p.ts,
                version=p.version,
                applied=p.applied,
                duplicate=p.duplicate,
                rejected=p.rejected,
                values=p.values,
            )
            for p in points
        ],
    )


async def _with_checkpoints(
    redis: RedisClient, keys: Keys, model: str, points: list[SeriesPoint], since: float | None
) -> list[SeriesPoint]:
    """``points`` plus a point per kept checkpoint version absent from them, by version; a
    sampled version that is kept is moved to its checkpoint's write time (the sample was
    taken up to ``interval_s`` later: drawn there, a burst's end would look slow)."""
    kept = await _read_kept_stats(redis, keys, model)
    written = {h.version: h.ts for h in kept}
    points = [replace(p, ts=written.get(p.version, p.ts)) for p in points]
    points = [p for p in points if since is None or p.ts > since]
    have = {p.version for p in points}
    extra: list[SeriesPoint] = []
    for h in kept:
        if h.version in have or h.stats is None:
            continue  # sampled already, or an entry from before history kept statistics
        if since is not None and h.ts <= since:
            continue
        try:
            stats = RunningStats.from_state(decode_state(h.stats))
        except (StateCodecError, KeyError, ValueError, TypeError):
            continue  # another version's layout: the sampled points still stand
        extra.append(replace(h, values=pick_values(stats.figures(), stats.last), stats=None))
    return sorted(points + extra, key=lambda p: p.version)


# The kept checkpoints without their learner state (the bulk of each entry: d^2 floats or
# more, up to the state budget): each entry's JSON head and statistics blob, cut in Redis
# (layout in service/store/checkpoints.py: head, newline, ``slen`` bytes of state, stats).
_KEPT_STATS_LUA = """
local out = {}
for i = 0, redis.call('LLEN', KEYS[1]) - 1 do
  local item = redis.call('LINDEX', KEYS[1], i)
  local nl = string.find(item, '\\n', 1, true)
  if nl then
    local ok, head = pcall(cjson.decode, string.sub(item, 1, nl - 1))
    if ok and type(head) == 'table' and head['slen'] then
      out[#out + 1] = string.sub(item, 1, nl) .. string.sub(item, nl + 1 + tonumber(head['slen']))
    end
  end
end
return out
"""


@dataclass(frozen=True)
class _Kept(SeriesPoint):
    stats: bytes | None = None


async def _read_kept_stats(redis: RedisClient, keys: Keys, model: str) -> list[_Kept]:
    """Each kept checkpoint that carries counters and statistics (entries written before
    they were kept are left out), as a point without values yet and its statistics blob."""
    raw = await redis.eval(_KEPT_STATS_LUA, 1, keys.history(model))
    out: list[_Kept] = []
    for item in raw or []:
        data = item if isinstance(item, bytes) else str(item).encode("latin-1")
        head_raw, _, stats = data.partition(b"\n")
        try:
            head = json.loads(head_raw)
            out.append(
                _Kept(
                    ts=float(head["ts"]),
                    version=int(head["version"]),
                    applied=int(head["applied"]),
                    duplicate=int(head["duplicate"]),
                    rejected=int(head["rejected"]),
                    stats=stats or None,
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return out
