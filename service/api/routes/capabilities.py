"""Task-specific endpoints: quantify (quantifiers), portfolio (index trackers) and blocks
(transductive learners). A model whose learner lacks the capability gets a 409."""

from __future__ import annotations

import math
import uuid

import numpy as np
from fastapi import APIRouter, Query, status
from starlette.concurrency import run_in_threadpool

import learners
from clients import wire
from learners.quantification import METHODS
from service.api.cost import check_cost
from service.api.deps import CacheDep, ModelDep, ProducerDep, SettingsDep
from service.api.errors import InvalidInput, NotSupported
from service.api.routes._common import check_vectors, dense_rows, errors, jsonable
from service.api.schemas import (
    BlockAccepted,
    BlockRequest,
    Holding,
    ModelSpec,
    PortfolioResponse,
    QuantifyRequest,
    QuantifyResponse,
)
from service.api.security import IngestKey, PredictKey, ReadKey
from service.metrics.figures import asset_names, is_index_tracker

router = APIRouter(prefix="/v1/models", tags=["tasks"])

#: Kinds whose ``weights`` is a portfolio (the endpoint is specific to index tracking).


def _kinds_with(attr: str) -> list[str]:
    return sorted(k for k, cls in learners.REGISTRY.items() if callable(getattr(cls, attr, None)))


def _unsupported(spec: ModelSpec, what: str, kinds: list[str]) -> NotSupported:
    return NotSupported(
        f"model {spec.id!r} is a {spec.kind!r} learner, which does not support {what};"
        f" kinds that do: {', '.join(kinds) or 'none installed'}"
    )


@router.post(
    "/{model_id}/quantify",
    response_model=QuantifyResponse,
    dependencies=[PredictKey],
    responses=errors(401, 404, 409, 413, 422, 503),
)
async def quantify(
    body: QuantifyRequest, model: ModelDep, settings: SettingsDep, cache: CacheDep
) -> QuantifyResponse:
    """Estimate the positive-class prevalence of a batch of vectors (quantifiers only)."""
    cls = learners.REGISTRY.get(model.kind)
    if cls is None or not callable(getattr(cls, "quantify", None)):
        raise _unsupported(model, "quantification", _kinds_with("quantify"))
    if body.method not in METHODS:  # the learner's own check, said before it runs
        raise InvalidInput(f"unknown method={body.method!r}; valid ones are {list(METHODS)}")
    rows = dense_rows(model, body.instances, "instances")
    check_vectors(model, rows, settings, "instances")
    check_cost(model, len(rows), settings.max_request_cost, "quantify")
    served = await cache.get(model)
    fn = served.learner.quantify  # type: ignore[attr-defined]
    X = np.asarray(rows, dtype=np.float64)
    prevalence = await run_in_threadpool(fn, X, method=body.method)
    return QuantifyResponse(
        prevalence=float(prevalence),
        method=body.method,
        n=len(body.instances),
        model_version=served.version,
    )


@router.get(
    "/{model_id}/portfolio",
    response_model=PortfolioResponse,
    dependencies=[ReadKey],
    responses=errors(401, 404, 409, 503),
)
async def portfolio(
    model: ModelDep,
    cache: CacheDep,
    top: int = Query(10, ge=0, le=10_000, description="How many of the largest holdings."),
) -> PortfolioResponse:
    """The index tracker's current portfolio, by asset name (its ``features``; ``x0``...
    when unnamed)."""
    if not is_index_tracker(model.kind):
        kinds = sorted(k for k in learners.REGISTRY if is_index_tracker(k))
        raise _unsupported(model, "portfolios (index tracking)", kinds)
    served = await cache.get(model)
    w = [float(v) for v in served.learner.weights]  # type: ignore[attr-defined]
    names = asset_names(model.features, model.dim)
    weights = dict(zip(names, w, strict=True))
    order = sorted(weights.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return PortfolioResponse(
        weights=weights,
        top=[Holding(asset=a, weight=v) for a, v in order if math.isfinite(v)],
        model_version=served.version,
    )


@router.post(
    "/{model_id}/blocks",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BlockAccepted,
    dependencies=[IngestKey],
    responses=errors(401, 404, 409, 413, 422, 503),
)
async def register_block(
    body: BlockRequest,
    model: ModelDep,
    settings: SettingsDep,
    cache: CacheDep,
    producer: ProducerDep,
) -> BlockAccepted:
    """Register a block of design vectors before their labels (transductive learners).

    Registration changes the learner's state, so it travels to the model's worker as a
    control event on the events topic (single writer); predictions for the block's vectors
    are served once the worker has applied and checkpointed it."""
    cls = learners.REGISTRY.get(model.kind)
    if cls is None or not callable(getattr(cls, "register", None)):
        raise _unsupported(model, "block registration", _kinds_with("register"))
    vectors = dense_rows(model, body.vectors, "vectors")
    check_vectors(model, vectors, settings, "vectors")
    check_cost(model, len(vectors), settings.max_request_cost, "blocks")
    served = await cache.get(model)
    # Dry run on a copy, so a block the learner would refuse is a 422 here, not a dead letter.
    trial = learners.load_state(served.learner.state())
    try:
        summary = await run_in_threadpool(trial.register, vectors)  # type: ignore[attr-defined]
    except ValueError as exc:  # register's refusal of the block, in its words
        raise InvalidInput(str(exc)) from None
    event_id = body.id or uuid.uuid4().hex
    record = wire.register(model.id, event_id, vectors, incarnation=model.incarnation_id)
    await producer.send_all(settings.events_topic, model.id, [record], partition=model.home)
    info = (
        {str(k): jsonable(v) for k, v in (summary or {}).items()}
        if isinstance(summary, dict)
        else {}
    )
    return BlockAccepted(event_id=event_id, T=len(vectors), summary=info)
