"""A model's live figures as JSON (``GET /v1/models/{id}/metrics``): what ``/metrics``
exports for it, typed, for the SDK and CLI (``clients/figures.py``), read from its latest
checkpoint. ``/figures`` is the same route's earlier name, kept for old clients."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from service.api.deps import ModelDep, StoreDep
from service.api.routes._common import errors
from service.api.schemas import FiguresOut
from service.api.security import ReadKey
from service.metrics.snapshots import read_snapshots

router = APIRouter(prefix="/v1/models", tags=["models"])


@router.get(
    "/{model_id}/metrics",
    response_model=FiguresOut,
    response_model_exclude_none=True,  # a figure the model does not have is left out
    dependencies=[ReadKey],
    responses=errors(401, 404, 422, 503),
)
@router.get(
    "/{model_id}/figures",
    response_model=FiguresOut,
    response_model_exclude_none=True,
    dependencies=[ReadKey],
    responses=errors(401, 404, 422, 503),
    deprecated=True,
    summary="Model Figures (deprecated: use /metrics)",
    operation_id="models-model_figures_deprecated",
)
async def model_figures(model: ModelDep, store: StoreDep) -> FiguresOut:
    """Counters, running figures (cumulative loss and regret, rmse, error rate ...), the
    learner's last-step diagnostics and an index tracker's top holdings, as of the model's
    latest checkpoint; zeros and empty before the first."""
    snaps = await read_snapshots(store.redis, store.keys, with_holdings=True, models=[model.id])
    if not snaps:  # deleted between the spec read and this one
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no model with id {model.id!r}")
    return FiguresOut(**snaps[0].as_json())
