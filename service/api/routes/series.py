"""A model's recent figures over time (the dashboard's history), sampled by the API
(``service/api/series.py``) into a capped Redis list (``service/store/series.py``), and on
request the kept checkpoints' own figures (``checkpoints=true``): a model fed in one burst
passes through several versions between two samples, which only its history holds."""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Query

from learners.codec import StateCodecError, decode_state
from service.api.deps import ModelDep, SettingsDep, StoreDep
from service.api.routes._common import errors
from service.api.schemas import SeriesOut, SeriesPointOut
from service.api.security import ReadKey
from service.metrics.running import RunningStats
from service.store.checkpoints import read_history
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
    kept = await read_history(redis, keys, model)
    written = {h.version: h.ts for h in kept}
    points = [replace(p, ts=written.get(p.version, p.ts)) for p in points]
    points = [p for p in points if since is None or p.ts > since]
    have = {p.version for p in points}
    extra: list[SeriesPoint] = []
    for h in kept:
        if h.version in have or h.counters is None or not h.stats:
            continue  # sampled already, or an entry from before history kept statistics
        if since is not None and h.ts <= since:
            continue
        try:
            stats = RunningStats.from_state(decode_state(h.stats))
        except (StateCodecError, KeyError, ValueError, TypeError):
            continue  # another version's layout: the sampled points still stand
        extra.append(
            SeriesPoint(
                ts=h.ts,
                version=h.version,
                applied=h.counters.applied,
                duplicate=h.counters.duplicate,
                rejected=h.counters.rejected,
                values=pick_values(stats.figures(), stats.last),
            )
        )
    return sorted(points + extra, key=lambda p: p.version)
