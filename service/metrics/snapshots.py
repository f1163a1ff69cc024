"""Read models' checkpointed counters and figures from Redis: the one reader behind
``/metrics``, ``/v1/models/{id}/metrics``, the dashboard's feed and its series sampler.

Workers write, per model, the ``model:{id}:state`` hash (see ``service.store.keys``). Its
``figures`` field (JSON, ``service/metrics/figures.py``) holds what a reader shows, computed
when the checkpoint was written, so a read never decodes statistics or solves the regret
system. A checkpoint written before that field existed is read the old way, from its
``stats`` blob (and its learner state, for holdings), until its model's next write.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

import learners
from learners.codec import StateCodecError, decode_state
from service.metrics import figures as figs
from service.metrics.exposition import OUTCOMES, ModelSnapshot
from service.metrics.running import RunningStats
from service.store import registry
from service.store.keys import Keys

logger = logging.getLogger(__name__)
FIELDS = ("version", *OUTCOMES, "halted", "figures")


async def read_snapshots(
    redis: Any, keys: Keys, *, with_holdings: bool = False, models: Sequence[str] | None = None
) -> list[ModelSnapshot]:
    """One snapshot per registered model, or per one of ``models`` that exists (counters
    zero before the first checkpoint); ``holdings`` is filled when ``with_holdings``."""
    if models is None:
        models = await registry.list_model_ids(redis, keys)
    if not models:
        return []
    pipe = redis.pipeline(transaction=False)
    for m in models:
        pipe.get(keys.spec(m))
        pipe.hmget(keys.state(m), FIELDS)
        pipe.hmget(keys.refused(m), ["events", "refused"])  # service/store/deadletters.py
    replies = await pipe.execute()
    out: list[ModelSnapshot] = []
    legacy: list[tuple[ModelSnapshot, dict[str, Any]]] = []
    for i, model in enumerate(models):
        raw_spec, row, (events, refused) = replies[3 * i : 3 * i + 3]
        if raw_spec is None:
            continue  # deleted between SMEMBERS and GET
        spec = json.loads(raw_spec)
        f = dict(zip(FIELDS, row, strict=True))
        snap = ModelSnapshot(model=model, kind=str(spec.get("kind", "")))
        snap.version = int(f["version"] or 0)
        snap.counters = {o: int(f[o] or 0) for o in OUTCOMES}
        snap.halted = bool(f["halted"])
        if events is not None and refused is not None and int(events):
            snap.refused_share = int(refused) / int(events)
        out.append(snap)
        if f["figures"]:
            try:
                read = figs.decode(f["figures"])
            except (ValueError, TypeError) as exc:
                logger.warning("model %s: unreadable figures: %s", model, exc)
                continue
            snap.figures, snap.diagnostics = read.figures, read.diagnostics
            snap.holdings = read.holdings if with_holdings else []
        elif snap.version > 0:
            legacy.append((snap, spec))
    if legacy:
        await _read_legacy(redis, keys, legacy, with_holdings)
    return out


async def _read_legacy(
    redis: Any, keys: Keys, snaps: list[tuple[ModelSnapshot, dict[str, Any]]], holdings: bool
) -> None:
    """Figures of checkpoints without a ``figures`` field, from their ``stats`` blob."""
    pipe = redis.pipeline(transaction=False)
    wanted = ["stats", "state"] if holdings else ["stats"]
    for snap, _ in snaps:
        pipe.hmget(keys.state(snap.model), wanted)
    for (snap, spec), row in zip(snaps, await pipe.execute(), strict=True):
        if row[0]:
            try:
                stats = RunningStats.from_state(decode_state(row[0]))
            except (StateCodecError, KeyError, ValueError) as exc:
                logger.warning("model %s: unreadable running statistics: %s", snap.model, exc)
            else:
                snap.figures = stats.figures()
                snap.diagnostics = dict(stats.last)
        if holdings and row[1] and figs.is_index_tracker(snap.kind):
            try:
                learner = learners.load_state(decode_state(row[1]))
            except (StateCodecError, KeyError, ValueError, TypeError):
                continue
            w = np.asarray(learner.weights, dtype=np.float64)  # type: ignore[attr-defined]
            names = figs.asset_names(registry.feature_names(spec), len(w))
            snap.holdings = figs.top_holdings(w, names)
