"""The worker loop: poll -> decode/validate -> dedupe -> learn -> checkpoint.

``run_worker(settings)`` builds the :class:`WorkerContext` and runs until ``stop`` is set
(SIGTERM/SIGINT in ``service.worker.main``), then writes a final checkpoint and leaves the
consumer group.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import ConsumerRecord, TopicPartition
from redis.asyncio import Redis

from service.config import Settings
from service.store.checkpoints import Stamp
from service.store.keys import Keys
from service.worker.checkpoint import Checkpoint
from service.worker.context import WorkerContext, default_worker_id
from service.worker.deadletter import DeadLetters
from service.worker.events import Event, InvalidEvent, decode_event, raw_event_id
from service.worker.faults import Faults
from service.worker.loading import load_models
from service.worker.models import APPLIED, DUPLICATE, REJECTED, SKIPPED
from service.worker.rebalance import RebalanceListener
from service.worker.retry import RedisUnavailable
from service.worker.rollback import handle_rollback

logger = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200
SESSION_TIMEOUT_MS = 10_000
HEARTBEAT_MS = 1_000
# How long the broker may hold a fetch that finds no new data. aiokafka keeps one fetch in
# flight per broker and leaves out partitions whose records are still buffered, so while a
# batch is being learned the next fetch asks only for the idle partitions and the broker
# holds it for this long before the busy partition can be fetched again. At the default
# (500 ms) a worker with one busy partition of four sat idle 60% of the time.
FETCH_MAX_WAIT_MS = 20
# aiokafka's consumer.stop() first waits for its group coordination task, which never ends
# while the broker keeps failing the group's sync (seen with tansu after a broker outage: a
# worker rejoined every 8 s and ignored SIGTERM). The final checkpoint is written by then.
CONSUMER_STOP_TIMEOUT_S = 10.0


async def process_batch(
    ctx: WorkerContext,
    checkpoint: Checkpoint,
    batch: dict[TopicPartition, list[ConsumerRecord]],
) -> None:
    """Handle one polled batch, partition by partition, in offset order.

    Example events are gathered per model and learned with one ``learn_many`` call per
    model (``ModelRuntime.handle_many``); anything else (a control event, an invalid event,
    an unknown model) first learns what is gathered, then is handled alone, so every model
    sees its events in log order and a rollback's seek-back drops the records after it.
    """
    decoded: list[tuple[TopicPartition, ConsumerRecord, Event | InvalidEvent]] = []
    wanted: set[str] = set()
    for tp, records in batch.items():
        floor = ctx.next_offset.get(tp, 0)
        for rec in records:
            if rec.offset < floor:
                ctx.stats.redelivered += 1
                continue
            floor = ctx.next_offset[tp] = rec.offset + 1
            try:
                ev: Event | InvalidEvent = decode_event(rec.key, rec.value)
                model: str | None = ev.model  # type: ignore[union-attr]
            except InvalidEvent as exc:
                ev = exc
                # count it against the model only when it sits on that model's partition
                own = exc.model is not None and rec.key == exc.model.encode()
                model = exc.model if own else None
            if model is not None and model not in ctx.models:
                wanted.add(model)
            decoded.append((tp, rec, ev))
    failed: dict[str, str] = {}
    if wanted:
        loaded, failed = await load_models(ctx, sorted(wanted))
        ctx.models.update(loaded)
    gathered: dict[str, list[tuple[Event, int, int]]] = {}  # model -> its examples, in order
    by_offset: dict[tuple[int, int], ConsumerRecord] = {}  # (partition, offset) -> record
    current: TopicPartition | None = None
    for tp, rec, ev in decoded:
        if rec.offset >= ctx.next_offset.get(tp, 0):
            continue  # sought back below this record (a rollback): it is delivered again
        if tp != current:  # one partition at a time: a group never spans two
            await _learn_gathered(ctx, gathered, by_offset)
            current = tp
        if type(ev) is Event and ev.type == "example" and ev.model in ctx.models:
            gathered.setdefault(ev.model, []).append((ev, tp.partition, rec.offset))
            by_offset[tp.partition, rec.offset] = rec
        else:
            await _learn_gathered(ctx, gathered, by_offset)
            await _handle(ctx, tp, rec, ev, failed)
        checkpoint.note(tp, rec.offset)
    await _learn_gathered(ctx, gathered, by_offset)


async def _learn_gathered(
    ctx: WorkerContext,
    gathered: dict[str, list[tuple[Event, int, int]]],
    records: dict[tuple[int, int], ConsumerRecord],
) -> None:
    """Learn each model's gathered examples in one go, then empty ``gathered``."""
    st = ctx.stats
    for model, items in gathered.items():
        rt = ctx.models[model]
        started = perf_counter()
        outcomes = rt.handle_many(items)
        elapsed = perf_counter() - started
        applied = 0
        for (_, partition, offset), (outcome, reason) in zip(items, outcomes, strict=True):
            st.processed += 1
            if outcome == APPLIED:
                applied += 1
            elif outcome == DUPLICATE:
                st.duplicate += 1
            elif outcome == SKIPPED:
                st.skipped += 1
            else:
                st.rejected += 1
                await ctx.deadletters.send(records[partition, offset], reason)
        if applied:
            st.applied += applied
            ctx.metrics.update_histogram(rt.learner.kind).observe_many(elapsed / applied, applied)
            ctx.faults.hit("after_learn", applied)
    gathered.clear()
    records.clear()


async def _handle(
    ctx: WorkerContext,
    tp: TopicPartition,
    rec: ConsumerRecord,
    ev: Event | InvalidEvent,
    failed: dict[str, str],
) -> None:
    st = ctx.stats
    st.processed += 1
    if isinstance(ev, InvalidEvent):
        rt = ctx.models.get(ev.model) if ev.model and rec.key == ev.model.encode() else None
        if rt is not None:
            if rt.covers(tp.partition, rec.offset):
                st.skipped += 1
                return
            rt.counters.rejected += 1
            rt.stamp = Stamp(tp.partition, rec.offset, raw_event_id(rec.value))
            rt.dirty = True
        st.rejected += 1
        await ctx.deadletters.send(rec, ev.reason)
        return
    rt = ctx.models.get(ev.model)
    if rt is None:
        st.rejected += 1
        reason = failed.get(ev.model) or f"unknown model {ev.model!r}"
        await ctx.deadletters.send(rec, reason)
        return
    if ev.type == "rollback":
        await handle_rollback(ctx, tp, rec, ev, rt)
        return
    started = perf_counter()
    outcome = rt.handle(ev, tp.partition, rec.offset)
    if outcome == APPLIED:
        ctx.metrics.update_histogram(rt.learner.kind).observe(perf_counter() - started)
        st.applied += 1
        ctx.faults.hit("after_learn")
    elif outcome == DUPLICATE:
        st.duplicate += 1
    elif outcome == SKIPPED:
        st.skipped += 1
    elif outcome == REJECTED:
        st.rejected += 1
        await ctx.deadletters.send(rec, rt.last_reason)


def refetch(ctx: WorkerContext, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
    """Drop a stale batch without losing records: each of its partitions still assigned
    goes back to the next offset the worker expects (the batch may hold records fetched
    before a seek, from the Kafka committed offset, or after it)."""
    assigned = ctx.consumer.assignment()
    for tp in batch:
        if tp in assigned and tp in ctx.next_offset:
            ctx.consumer.seek(tp, ctx.next_offset[tp])


async def _leave_group(ctx: WorkerContext) -> None:
    """Stop the consumer, which leaves the group so the partitions move at once; give up
    after ``CONSUMER_STOP_TIMEOUT_S`` (the group then drops us after its session timeout)."""
    try:
        await asyncio.wait_for(ctx.consumer.stop(), CONSUMER_STOP_TIMEOUT_S)
    except TimeoutError:
        logger.warning(
            "consumer did not leave the group within %.0f s; exiting anyway",
            CONSUMER_STOP_TIMEOUT_S,
        )


async def build_context(settings: Settings, worker_id: str | None = None) -> WorkerContext:
    kafka = settings.kafka_options()
    consumer = AIOKafkaConsumer(
        group_id=settings.consumer_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=settings.max_poll_records,
        session_timeout_ms=settings.consumer_session_timeout_ms,
        heartbeat_interval_ms=min(HEARTBEAT_MS, settings.consumer_session_timeout_ms // 3),
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        client_id=f"onlinepredict-worker-{worker_id or default_worker_id()}",
        **kafka,
    )
    producer = AIOKafkaProducer(acks="all", linger_ms=5, **kafka)
    probe = AIOKafkaConsumer(
        enable_auto_commit=False, group_id=None, auto_offset_reset="none", **kafka
    )
    wid = worker_id or default_worker_id()
    redis = Redis.from_url(
        settings.redis_url, socket_connect_timeout=2.0, socket_timeout=5.0, health_check_interval=5
    )
    return WorkerContext(
        settings=settings,
        keys=Keys(settings.key_prefix),
        redis=redis,
        consumer=consumer,
        producer=producer,
        probe=probe,
        deadletters=DeadLetters(producer, settings.deadletter_topic, wid),
        worker_id=wid,
        faults=Faults.from_env(),
    )


async def run_worker(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    worker_id: str | None = None,
) -> WorkerContext:
    """Consume until ``stop`` is set; returns the context (for its counters)."""
    ctx = await build_context(settings, worker_id)
    if stop is not None:
        ctx.stopping = stop
    checkpoint = Checkpoint(ctx)
    ctx.last_poll = ctx.clock()
    health = None
    if settings.worker_metrics_port:
        from service.worker.health import serve_health

        health = await serve_health(ctx, settings.worker_metrics_port, checkpoint=checkpoint)
    await ctx.producer.start()
    await ctx.probe.start()
    try:
        ctx.consumer.subscribe([settings.events_topic], listener=RebalanceListener(ctx, checkpoint))
        await ctx.consumer.start()
        logger.info("worker %s consuming %s", ctx.worker_id, settings.events_topic)
        try:
            while not ctx.stopping.is_set():
                ctx.last_poll = ctx.clock()
                generation = ctx.generation
                batch = await ctx.consumer.getmany(
                    timeout_ms=POLL_TIMEOUT_MS, max_records=settings.max_poll_records
                )
                async with ctx.lock:
                    if generation != ctx.generation:
                        refetch(ctx, batch)  # a rebalance or seek happened: stale records
                        continue
                    if batch:
                        await process_batch(ctx, checkpoint, batch)
                    if checkpoint.expired():
                        await checkpoint.commit()
            async with ctx.lock:
                await checkpoint.commit()  # final checkpoint on shutdown
                await checkpoint.drain()
        except RedisUnavailable as exc:
            logger.error("shutting down without a final checkpoint: %s", exc)
        finally:
            await _leave_group(ctx)
    finally:
        if health is not None:
            health.close()
        await ctx.probe.stop()
        await ctx.producer.stop()
        await ctx.redis.aclose()
    logger.info("worker %s stopped: %s", ctx.worker_id, ctx.stats)
    return ctx
