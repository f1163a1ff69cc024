"""A model's recent figures over time (the dashboard's history), sampled by the API
(``service/api/series.py``) into a capped Redis list (``service/store/series.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import ModelDep, SettingsDep, StoreDep
from service.api.routes._common import errors
from service.api.schemas import SeriesOut, SeriesPointOut
from service.api.security import ReadKey
from service.store.series import read_series

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
) -> SeriesOut:
    """The model's sampled figures, oldest first: at most one point every
    ``ONLINEPREDICT_SERIES_INTERVAL_S`` (5 s) when its checkpoint changed, the last
    ``ONLINEPREDICT_SERIES_POINTS`` (720) kept. Empty before the first checkpoint."""
    points = await read_series(store.redis, store.keys, model.id, limit=limit, since=since)
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
