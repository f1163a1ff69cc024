"""The worker loop: poll -> decode/validate -> dedupe -> learn -> checkpoint.

``run_worker(settings)`` builds the :class:`WorkerContext` and runs until ``stop`` is set
(SIGTERM/SIGINT in ``service.worker.main``), then writes a final checkpoint and leaves the
consumer group.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from time import perf_counter
from typing import Protocol

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
from service.worker.loading import load_models, resync_model
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
# The stop bound (``worker_stop_timeout_s``) is shared out: the final checkpoint may take
# up to half of it; leaving the group (aiokafka's consumer.stop() first waits for its group
# coordination task, which never ends while the broker keeps failing the group's sync) up
# to half of what is left; the producer's flush the rest, less a reserve for the exit.
CHECKPOINT_SHARE = 0.5
LEAVE_SHARE = 0.5
EXIT_RESERVE_S = 1.0
MIN_STEP_S = 0.1


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
        if rt is not None and rt.foreign(tp.partition) is None:
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
    if ev.type == "created":
        await _created(ctx, tp, rec, ev)
        return
    if rt is None:
        st.rejected += 1
        reason = failed.get(ev.model) or f"unknown model {ev.model!r}"
        await ctx.deadletters.send(rec, reason)
        return
    foreign = rt.foreign(tp.partition)
    if foreign is not None:  # changes nothing: not covered by the stamp, seen on replays
        st.rejected += 1
        await ctx.deadletters.send(rec, foreign)
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


async def _created(ctx: WorkerContext, tp: TopicPartition, rec: ConsumerRecord, ev: Event) -> None:
    """A model's creation marker. Not user data: never dead-lettered, never counted against
    a model. Its own incarnation's marker is covered by the origin stamp; another one that
    its stamp does not cover means the model was re-created while this worker held it, so
    the stored incarnation is loaded (docs/reliability.md, "Re-creating a model")."""
    ctx.stats.skipped += 1
    rt = ctx.models.get(ev.model)
    if rt is None or rt.covers(tp.partition, rec.offset) or rt.foreign(tp.partition):
        return
    if rt.origin is None or rt.origin.event_id != ev.id:
        await resync_model(ctx, ev.model)


def refetch(ctx: WorkerContext, batch: dict[TopicPartition, list[ConsumerRecord]]) -> None:
    """Drop a stale batch without losing records: each of its partitions still assigned
    goes back to the next offset the worker expects (the batch may hold records fetched
    before a seek, from the Kafka committed offset, or after it)."""
    assigned = ctx.consumer.assignment()
    for tp in batch:
        if tp in assigned and tp in ctx.next_offset:
            ctx.consumer.seek(tp, ctx.next_offset[tp])


class Deadline:
    """The time left of the stop bound, shared out among the shutdown steps."""

    def __init__(self, ctx: WorkerContext) -> None:
        self.clock = ctx.clock
        start = ctx.stopped_at if ctx.stopped_at is not None else ctx.clock()
        self.end = start + ctx.settings.worker_stop_timeout_s - EXIT_RESERVE_S

    def left(self, share: float = 1.0) -> float:
        return max(share * (self.end - self.clock()), MIN_STEP_S)


async def _final_checkpoint(ctx: WorkerContext, checkpoint: Checkpoint, deadline: Deadline) -> None:
    """Write the final checkpoint, within its share of the stop bound. Not writing it is
    safe (the events after the last one are replayed); the exit code says so."""
    budget = deadline.left(CHECKPOINT_SHARE)

    async def write() -> None:
        async with ctx.lock:  # a rebalance callback may hold it
            await checkpoint.commit()
            await checkpoint.drain()

    writes = checkpoint.state_writes
    try:
        await asyncio.wait_for(write(), budget)
        ctx.final_checkpoint = True
    except TimeoutError:
        if checkpoint.state_writes > writes:  # in Redis; only the Kafka offset hint is late
            ctx.final_checkpoint = True
            logger.warning("final checkpoint written; its Kafka offset commit did not finish")
            return
        logger.error(
            "no final checkpoint: not written within %.1f s (Redis slow or down, or a"
            " rebalance in progress); its events will be replayed",
            budget,
        )
    except RedisUnavailable as exc:
        logger.error("no final checkpoint: %s; its events will be replayed", exc)


async def _bounded(what: str, step: Awaitable[None], seconds: float) -> None:
    """Await a shutdown step, giving up after ``seconds`` with a log line."""
    try:
        await asyncio.wait_for(step, seconds)
    except TimeoutError:
        logger.warning("%s did not finish within %.1f s; exiting anyway", what, seconds)
    except asyncio.CancelledError:  # aiokafka's stop() re-raises its own tasks' cancellation
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # we are being cancelled ourselves
        logger.warning("%s was cancelled inside the client; exiting anyway", what)
    except Exception as exc:  # a broken connection while closing it: nothing left to do
        logger.warning("%s failed (%s: %s); exiting anyway", what, type(exc).__name__, exc)


async def _close_unstarted(ctx: WorkerContext) -> None:
    for client in (ctx.consumer, ctx.probe, ctx.producer):
        await client.stop()
    await ctx.redis.aclose()


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


async def _poll(
    ctx: WorkerContext, stopped: asyncio.Future[None]
) -> dict[TopicPartition, list[ConsumerRecord]] | None:
    """One poll, or None when the stop comes first. ``getmany`` waits for an assignment
    whatever its timeout, so a worker stuck rejoining its group (a broker that keeps
    failing the group's sync) would never see the stop; records it had fetched but not
    handed out are dropped with the consumer, unacknowledged."""
    poll = asyncio.ensure_future(
        ctx.consumer.getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=ctx.settings.max_poll_records)
    )
    await asyncio.wait((poll, stopped), return_when=asyncio.FIRST_COMPLETED)
    if poll.done():
        return poll.result()
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)
    return None


class PhaseSink(Protocol):
    phase: str  # what the worker is doing, for the stop watchdog's log line


async def run_worker(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    worker_id: str | None = None,
    phase: PhaseSink | None = None,
) -> WorkerContext:
    """Consume until ``stop`` is set, then stop within ``settings.worker_stop_timeout_s``;
    returns the context (its counters, and whether the final checkpoint was written)."""
    ctx = await build_context(settings, worker_id)
    if stop is not None:
        ctx.stopping = stop
    if ctx.stopping.is_set():  # asked to stop while starting: nothing learned, nothing to write
        ctx.final_checkpoint = True
        await _bounded("closing the clients", _close_unstarted(ctx), settings.worker_stop_timeout_s)
        logger.info("worker %s stopped while starting", ctx.worker_id)
        return ctx

    def doing(what: str) -> None:
        if phase is not None:
            phase.phase = what

    checkpoint = Checkpoint(ctx)
    ctx.last_poll = ctx.clock()
    health = None
    if settings.worker_metrics_port:
        from service.worker.health import serve_health

        health = await serve_health(
            ctx,
            settings.worker_metrics_port,
            settings.worker_metrics_host,
            checkpoint=checkpoint,
        )
    deadline: Deadline | None = None

    async def note_stop() -> None:  # the bound runs from the stop request
        await ctx.stopping.wait()
        ctx.stopped_at = ctx.clock()

    stop_watch = asyncio.ensure_future(note_stop())
    doing("connecting to the broker")
    await ctx.producer.start()
    await ctx.probe.start()
    try:
        ctx.consumer.subscribe([settings.events_topic], listener=RebalanceListener(ctx, checkpoint))
        await ctx.consumer.start()
        logger.info("worker %s consuming %s", ctx.worker_id, settings.events_topic)
        try:
            while not ctx.stopping.is_set():
                doing("polling (or rebalancing)")
                ctx.last_poll = ctx.clock()
                generation = ctx.generation
                batch = await _poll(ctx, stop_watch)
                if batch is None:
                    break  # stopped while the poll waited (e.g. for a group rejoin)
                async with ctx.lock:
                    if generation != ctx.generation:
                        refetch(ctx, batch)  # a rebalance or seek happened: stale records
                        continue
                    doing("learning a batch")
                    if batch:
                        await process_batch(ctx, checkpoint, batch)
                    if checkpoint.expired():
                        doing("checkpointing")
                        await checkpoint.commit()
            deadline = Deadline(ctx)
            doing("writing the final checkpoint")
            await _final_checkpoint(ctx, checkpoint, deadline)
        except RedisUnavailable as exc:
            logger.error("no final checkpoint: %s; its events will be replayed", exc)
        finally:
            deadline = deadline or Deadline(ctx)
            doing("leaving the consumer group")
            await _bounded(
                "leaving the consumer group", ctx.consumer.stop(), deadline.left(LEAVE_SHARE)
            )
    finally:
        deadline = deadline or Deadline(ctx)
        doing("flushing the producer")
        if health is not None:
            health.close()
        await _bounded("stopping the probe", ctx.probe.stop(), deadline.left(0.2))
        await _bounded("flushing the producer", ctx.producer.stop(), deadline.left())
        await _bounded("closing Redis", ctx.redis.aclose(), deadline.left())
        stop_watch.cancel()
    logger.info(
        "worker %s stopped (%s final checkpoint): %s",
        ctx.worker_id,
        "with its" if ctx.final_checkpoint else "WITHOUT a",
        ctx.stats,
    )
    return ctx
