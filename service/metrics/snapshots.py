"""Read every model's checkpointed counters and running statistics from Redis.

Workers write, per model, the ``model:{id}:state`` hash (see ``service.store.keys``); its
``stats`` field holds the codec blob of ``RunningStats.state()``. This module turns those
hashes into ``ModelSnapshot``s for ``/metrics`` and the built-in dashboard.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from learners.codec import StateCodecError, decode_state
from service.metrics.exposition import OUTCOMES, ModelSnapshot
from service.metrics.running import RunningStats
from service.store.keys import Keys

logger = logging.getLogger(__name__)
TOP_HOLDINGS = 10
SNAPSHOT_FIELDS = ("version", *OUTCOMES, "stats")  # what a snapshot reads besides holdings


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def read_snapshots(
    redis: Any, keys: Keys, *, with_holdings: bool = False, models: Sequence[str] | None = None
) -> list[ModelSnapshot]:
    """One snapshot per registered model, or per one of ``models`` that exists (counters
    zero before the first checkpoint)."""
    if models is None:
        models = sorted(_text(m) for m in await redis.smembers(keys.models()))
    if not models:
        return []
    pipe = redis.pipeline(transaction=False)
    for m in models:
        pipe.get(keys.spec(m))
        if with_holdings:
            pipe.hgetall(keys.state(m))
        else:  # not the learner's state blob, which can be large (the series sampler)
            pipe.hmget(keys.state(m), SNAPSHOT_FIELDS)
    replies = await pipe.execute()
    out: list[ModelSnapshot] = []
    for i, model in enumerate(models):
        raw_spec, state = replies[2 * i], replies[2 * i + 1]
        if raw_spec is None:
            continue  # deleted between SMEMBERS and GET
        spec = json.loads(raw_spec)
        if isinstance(state, list):
            state = {k: v for k, v in zip(SNAPSHOT_FIELDS, state, strict=True) if v is not None}
        fields = {_text(k): v for k, v in (state or {}).items()}
        snap = ModelSnapshot(model=model, kind=str(spec.get("kind", "")))
        snap.version = int(fields.get("version", 0) or 0)
        snap.counters = {o: int(fields.get(o, 0)) for o in OUTCOMES}
        blob = fields.get("stats")
        if blob:
            try:
                stats = RunningStats.from_state(decode_state(blob))
            except (StateCodecError, KeyError, ValueError) as exc:
                logger.warning("model %s: unreadable running statistics: %s", model, exc)
            else:
                snap.figures = stats.figures()
                snap.diagnostics = dict(stats.last)
        if with_holdings and fields.get("state"):
            snap.holdings = _holdings(fields["state"], spec)
        out.append(snap)
    return out


def _holdings(blob: bytes, spec: dict[str, Any]) -> list[tuple[str, float]]:
    """Top positions of an index tracker (largest weights), by asset name where known."""
    try:
        state = decode_state(blob)
    except StateCodecError:
        return []
    w = state.get("w_")
    if spec.get("kind") != "apas" or not isinstance(w, np.ndarray):
        return []
    names = spec.get("assets") or [f"asset_{i}" for i in range(w.shape[0])]
    order = np.argsort(-w)[:TOP_HOLDINGS]
    return [(str(names[i]), float(w[i])) for i in order if w[i] > 1e-6]
