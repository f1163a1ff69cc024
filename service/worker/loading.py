"""Loading models into a worker: spec + latest checkpoint + seen ids, pipelined."""

from __future__ import annotations

import logging

from aiokafka.structs import TopicPartition

from service.store import registry
from service.store.checkpoints import read_seen, read_states
from service.worker.context import WorkerContext
from service.worker.models import ModelRuntime
from service.worker.retry import with_redis

logger = logging.getLogger(__name__)


def unknown_model_reason(model: str) -> str:
    return f"unknown model {model!r}: create it first (POST /v1/models)"


async def load_models(
    ctx: WorkerContext, ids: list[str]
) -> tuple[dict[str, ModelRuntime], dict[str, str]]:
    """Runtimes for ``ids`` and, for those that cannot be loaded, the reason."""
    r, keys = ctx.redis, ctx.keys

    async def fetch():  # type: ignore[no-untyped-def]
        specs = await registry.get_specs(r, keys, ids)
        present = [m for m in ids if m in specs]
        states = await read_states(r, keys, present)
        seen = {m: await read_seen(r, keys, m) for m in present if states[m] is not None}
        return specs, states, seen

    specs, states, seen = await with_redis(ctx, fetch, "loading models")
    loaded: dict[str, ModelRuntime] = {}
    failed: dict[str, str] = {}
    for m in ids:
        if m not in specs:
            failed[m] = unknown_model_reason(m)
            continue
        try:
            loaded[m] = ModelRuntime.create(
                specs[m], states[m], seen.get(m, []), seen_keep=ctx.settings.seen_ids_keep
            )
        except (ValueError, TypeError, KeyError) as exc:
            failed[m] = f"cannot load model {m!r}: {exc}"
            logger.error("%s", failed[m])
    return loaded, failed


async def resync_model(ctx: WorkerContext, model: str) -> None:
    """Replace the in-memory model by its stored checkpoint and rewind its partition.

    Used when a checkpoint write lost the version check (another writer, a rollback or a
    deletion happened): the stored state wins and the events after its stamp are replayed.
    """
    old = ctx.models.pop(model, None)
    loaded, _ = await load_models(ctx, [model])
    if model not in loaded:
        logger.warning("model %r is gone from the registry; dropped", model)
        return
    rt = loaded[model]
    ctx.models[model] = rt
    ref = rt.stamp or (old.stamp if old else None)
    if ref is None:
        return
    partition = ref.partition
    tp = TopicPartition(ctx.settings.events_topic, partition)
    if tp not in ctx.consumer.assignment():
        ctx.models.pop(model, None)
        return
    if rt.stamp is not None:
        target = rt.stamp.offset + 1
    else:
        target = (await ctx.consumer.beginning_offsets([tp]))[tp]
    if target < await ctx.consumer.position(tp):
        ctx.consumer.seek(tp, target)
        ctx.next_offset[tp] = target
        ctx.generation += 1  # records already fetched for this partition are stale
    logger.warning("model %r reloaded at version %d; replaying from %d", model, rt.version, target)
