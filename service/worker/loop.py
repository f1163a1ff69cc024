"""The worker loop: poll -> decode/validate -> dedupe -> learn -> checkpoint.

``run_worker(settings)`` builds a :class:`Worker` on the aiokafka log and the Redis store
(``build_worker``) and runs until ``stop`` is set (SIGTERM/SIGINT in
``service.worker.main``), then writes a final checkpoint and leaves the consumer group.
``Worker`` wires any ``Log`` and ``ModelStore`` (``service.worker.ports``): the in-memory
adapters drive the same ``process_batch`` and ``Checkpointer`` code without a broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter
from typing import Protocol

import learners
from clients.wire import FRAME_MAGIC
from service.config import Settings
from service.store.checkpoints import Stamp
from service.worker.adapters.kafka_log import KafkaLog
from service.worker.adapters.redis_store import RedisStore
from service.worker.assignment import Assignment
from service.worker.audit import Audit
from service.worker.checkpointer import Checkpointer
from service.worker.context import WorkerContext
from service.worker.deadletter import DeadLetters
from service.worker.drain import Drain
from service.worker.events import Event, InvalidEvent, decode_event, raw_event_id
from service.worker.faults import Faults
from service.worker.forward import Forwarder
from service.worker.frame_apply import apply_frame
from service.worker.frames import Frame, decode_frame
from service.worker.ports import Batch, Log, ModelStore, Record, StoreUnavailable, TopicPartition
from service.worker.rebalance import Rebalance
from service.worker.rollback import Rollback
from service.worker.runtime import APPLIED, DUPLICATE, REJECTED, SKIPPED, ModelRuntime, load_models
from service.worker.telemetry import WorkerMetrics, WorkerStats

logger = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 200
# The stop bound (``worker_stop_timeout_s``) is shared out: the final checkpoint may take
# up to half of it; leaving the group (aiokafka's consumer.stop() first waits for its group
# coordination task, which never ends while the broker keeps failing the group's sync) up
# to half of what is left; the producer's flush the rest, less a reserve for the exit.
CHECKPOINT_SHARE = 0.5
LEAVE_SHARE = 0.5
EXIT_RESERVE_S = 1.0
MIN_STEP_S = 0.1


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Worker:
    """The composition root of a worker: its two ports (``log``, ``store``), where it
    stands in each partition (``assignment``), its models, counters and components."""

    def __init__(
        self,
        settings: Settings,
        log: Log,
        store: ModelStore,
        *,
        worker_id: str,
        stats: WorkerStats | None = None,
        stopping: asyncio.Event | None = None,
        faults: Faults | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.log = log
        self.store = store
        self.clock = clock
        self.stats = stats if stats is not None else WorkerStats()
        self.stopping = stopping if stopping is not None else asyncio.Event()
        self.faults = faults if faults is not None else Faults()
        self.metrics = WorkerMetrics()  # timings for /metrics
        self.models: dict[str, ModelRuntime] = {}
        self.lock = asyncio.Lock()  # batch vs rebalance callbacks
        self.assignment = Assignment(log)
        self.deadletters = DeadLetters(log, settings.deadletter_topic, worker_id)
        self.forward = Forwarder(log, self.stats)  # records of a model off its home partition
        # what the components share; positional, as every field has its own type (mypy
        # checks the order)
        ctx = WorkerContext(
            settings,
            log,
            store,
            self.assignment,
            self.models,
            self.stats,
            self.deadletters,
            self.metrics,
            self.faults,
            self.lock,
            clock,
        )
        self.checkpoint = Checkpointer(ctx)
        self.rollback = Rollback(ctx)
        self.rebalance = Rebalance(ctx, self.checkpoint)
        self.audit = Audit(ctx, self.checkpoint, self.rebalance)
        self.last_poll = 0.0  # clock() at the last poll: /healthz freshness
        self.final_checkpoint = False  # set when the shutdown's checkpoint was written
        self.stopped_at: float | None = None  # clock() when the stop was requested
        self.drained: bool | None = None  # a draining stop: learned to the end of the log

    def lags(self) -> list[tuple[int, int]]:
        return self.assignment.lags(self.settings.events_topic)


async def process_batch(w: Worker, batch: Batch) -> None:
    """Handle one polled batch, partition by partition, in offset order.

    Example events are gathered per model and learned with one ``learn_many`` call per
    model (``ModelRuntime.handle_many``); anything else (a control event, an invalid event,
    an unknown model) first learns what is gathered, then is handled alone, so every model
    sees its events in log order and a rollback's seek-back drops the records after it. A
    frame (docs/events.md §6) is a block already: handled alone too, its rows as events.
    """
    next_offset = w.assignment.next_offset
    runs: list[tuple[TopicPartition, Sequence[Record], list[Event | Frame | InvalidEvent]]] = []
    wanted: set[str] = set()
    models = w.models
    for tp, records in batch.items():
        kept = _unseen(w, tp, records)
        if not kept:
            continue
        evs: list[Event | Frame | InvalidEvent] = []
        for rec in kept:
            try:
                value = rec.value
                ev: Event | Frame | InvalidEvent = (
                    decode_frame(rec.key, value)
                    if value is not None and value[:4] == FRAME_MAGIC  # docs/events.md §6
                    else decode_event(rec.key, value)
                )
                model: str | None = ev.model  # type: ignore[union-attr]
            except InvalidEvent as exc:
                ev = exc
                # count it against the model only when it sits on that model's partition
                own = exc.model is not None and rec.key == exc.model.encode()
                model = exc.model if own else None
            if model is not None and model not in models:
                wanted.add(model)
            evs.append(ev)
        runs.append((tp, kept, evs))
    failed: dict[str, str] = {}
    if wanted:
        loaded, failed = await load_models(
            w.store, sorted(wanted), seen_keep=w.settings.seen_ids_keep
        )
        models.update(loaded)
    note = w.checkpoint.note
    for tp, recs, evs in runs:  # one partition each: a group never spans two
        p = tp.partition
        floor = next_offset.get(tp, 0)
        gathered: dict[str, list[tuple[Event, int, int]]] = {}  # model -> its examples
        noted = recs[0]  # the last gathered record not noted yet (when ``unnoted``)
        unnoted = 0
        for rec, ev in zip(recs, evs, strict=True):
            off = rec.offset
            if off >= floor:
                continue  # sought back below this record (a rollback): it is delivered again
            # the usual record, inline: an example of a loaded model whose stamp does not
            # sit at this offset (so ``_not_its_stamp`` is False)
            if (
                type(ev) is Event
                and ev.type == "example"
                and (rt := models.get(ev.model)) is not None
                and ((s := rt.stamp) is None or s.offset != off or s.partition != p)
                and (ev.incarnation is None or ev.incarnation == rt.incarnation)
            ):
                items = gathered.get(ev.model)
                if items is None:
                    items = gathered[ev.model] = []
                items.append((ev, p, off))
                noted = rec
                unnoted += 1
                continue
            if unnoted:
                w.checkpoint.note_run(tp, noted, unnoted)
                unnoted = 0
            if _not_its_stamp(w, tp, rec, ev):
                await _learn_gathered(w, gathered, recs)
                w.checkpoint.log_changed(tp, off)
                break  # found changed under the worker: restored after
            if type(ev) is Event and ev.type == "example" and _learnable(models, ev):
                gathered.setdefault(ev.model, []).append((ev, p, off))
            elif isinstance(ev, Frame):  # a block already: learned alone, in its log position
                await _learn_gathered(w, gathered, recs)
                await _apply_frame(w, tp, rec, ev, failed)
            else:
                await _learn_gathered(w, gathered, recs)
                await _handle(w, tp, rec, ev, failed)
            note(tp, rec)
            floor = next_offset.get(tp, 0)  # a rollback may have sought back
        else:
            if unnoted:
                w.checkpoint.note_run(tp, noted, unnoted)
            await _learn_gathered(w, gathered, recs)
    # forwarded records are on the broker before any checkpoint moves past them; then the
    # floor moves past them (not before: a batch forwards model by model, not in offset order)
    forwarded = w.assignment.forward_floor
    for tp, offset in (await w.forward.flush()).items():
        forwarded[tp] = max(forwarded.get(tp, 0), offset)
    # the offset committed next never goes below the floor: a partition read again from
    # its start (no model of its own) would else commit a lower offset, and the next owner
    # would forward the records above it again
    commit = w.checkpoint.offsets
    for tp in batch:
        if tp in commit and tp in forwarded:
            commit[tp] = max(commit[tp], forwarded[tp])


def _learnable(models: dict[str, ModelRuntime], ev: Event) -> bool:
    """A loaded model's example that names no other incarnation (``_stale``)."""
    rt = models.get(ev.model)
    return rt is not None and (ev.incarnation is None or ev.incarnation == rt.incarnation)


def _stale(rt: ModelRuntime, incarnation: str | None) -> str | None:
    """Why a record that names ``incarnation`` is not the model's, or None: produced for
    an incarnation that was deleted (and the model created again) before it reached the
    log (docs/reliability.md, "Re-creating a model"). Such a record changes nothing."""
    if incarnation is None or incarnation == rt.incarnation:
        return None
    return (
        f"model {rt.model!r}: the record names incarnation {incarnation!r}, the model is now"
        f" incarnation {rt.incarnation or 'none'!r} (deleted and created again after the record"
        ' was produced); not learned (docs/reliability.md, "Re-creating a model")'
    )


async def _forward(w: Worker, tp: TopicPartition, rec: Record, home: int) -> None:
    """A record of a model that lives on partition ``home``: produced there as it is
    (service/worker/forward.py), unless it was forwarded already: by an earlier owner of
    ``tp`` (below the committed offset), or by this worker before a seek back (a model
    reloaded, a rollback)."""
    if rec.offset < w.assignment.forward_floor.get(tp, 0):
        w.stats.skipped += 1
        return
    await w.forward.send(rec, home)


def _unseen(w: Worker, tp: TopicPartition, records: Sequence[Record]) -> list[Record]:
    """The records of ``tp`` at or past its next offset, which moves past them; the others
    are counted as redelivered and the partition marked suspect."""
    next_offset = w.assignment.next_offset
    floor = next_offset.get(tp, 0)
    kept: list[Record] = []
    for rec in records:
        if rec.offset < floor:  # a repeat, or the client fell off a log cut under it
            w.stats.redelivered += 1
            w.checkpoint.suspect.add(tp)
            continue
        floor = rec.offset + 1
        kept.append(rec)
    if kept:
        next_offset[tp] = floor
    return kept


def _not_its_stamp(
    w: Worker, tp: TopicPartition, rec: Record, ev: Event | Frame | InvalidEvent
) -> bool:
    """Whether ``rec`` sits at its model's stamp with another event id: the log was cut
    and rewritten there (read when another model's lower stamp set the position)."""
    model = ev.model if type(ev) is Event or type(ev) is Frame else None
    if isinstance(ev, InvalidEvent) and ev.model is not None and rec.key == ev.model.encode():
        model = ev.model
    rt = w.models.get(model) if model is not None else None
    s = rt.stamp if rt is not None and rt.halted is None else None  # a halted one's is void
    if s is None or s.offset != rec.offset or s.partition != tp.partition:
        return False
    event_id = ev.id if type(ev) is Event or type(ev) is Frame else raw_event_id(rec.value)
    return event_id != s.event_id


_APPLIED = (APPLIED, "")  # handle_many's outcome of an applied event


async def _learn_gathered(
    w: Worker, gathered: dict[str, list[tuple[Event, int, int]]], records: Sequence[Record]
) -> None:
    """Learn each model's gathered examples in one go, then empty ``gathered``.
    ``records``: the partition's records in offset order (a rejected one is dead-lettered)."""
    if not gathered:
        return
    st = w.stats
    for model, items in gathered.items():
        rt = w.models[model]
        if rt.foreign(items[0][1]) is not None:  # a group is one partition's
            assert rt.home is not None
            tp = TopicPartition(records[0].topic, items[0][1])
            for _, _, offset in items:
                st.processed += 1
                await _forward(w, tp, records[bisect_left(records, offset, key=_offset)], rt.home)
            continue
        started = perf_counter()
        outcomes = rt.handle_many(items)
        elapsed = perf_counter() - started
        applied = outcomes.count(_APPLIED)
        if applied == len(items):  # the usual: nothing else to count or send
            st.processed += applied
        else:
            for (_, _, offset), (outcome, reason) in zip(items, outcomes, strict=True):
                st.processed += 1
                if outcome == APPLIED:
                    pass
                elif outcome == DUPLICATE:
                    st.duplicate += 1
                elif outcome == SKIPPED:
                    st.skipped += 1
                else:
                    st.rejected += 1
                    at = bisect_left(records, offset, key=_offset)
                    await w.deadletters.send(records[at], reason)
        if applied:
            st.applied += applied
            w.metrics.update_histogram(rt.learner.kind).observe_many(elapsed / applied, applied)
            w.faults.hit("after_learn", applied)
    gathered.clear()


def _offset(rec: Record) -> int:
    return rec.offset


async def _apply_frame(
    w: Worker, tp: TopicPartition, rec: Record, frame: Frame, failed: dict[str, str]
) -> None:
    """A frame: its rows counted as events, each refused row dead-lettered alone as a JSON
    event with its reason (docs/reliability.md, "Frames")."""
    st = w.stats
    n = len(frame)
    st.processed += n
    w.checkpoint.pending += n - 1  # commit_every counts events: the frame's rows (note: 1)
    rt = w.models.get(frame.model)
    if rt is not None and rt.home is not None and rt.foreign(tp.partition) is not None:
        await _forward(w, tp, rec, rt.home)
        return
    stale = _stale(rt, frame.incarnation) if rt is not None else None
    if rt is not None and stale is not None:
        if rt.skips(tp.partition, rec.offset):
            st.skipped += n
            return
        rt = None  # changes nothing, the model's counters included
        rejected = [(i, stale) for i in range(n)]
        applied = 0
        elapsed = 0.0
    elif rt is None:
        reason = failed.get(frame.model) or f"unknown model {frame.model!r}"
        rejected = [(i, reason) for i in range(n)]
        applied = 0
        elapsed = 0.0
    else:
        started = perf_counter()
        out = apply_frame(rt, frame, tp.partition, rec.offset)
        elapsed = perf_counter() - started
        applied, rejected = out.applied, out.rejected
        st.duplicate += out.duplicate
        st.skipped += out.skipped
    st.rejected += len(rejected)
    for i, reason in rejected:
        await w.deadletters.send(rec, reason, (i, frame.row_event(i)))
    if applied and rt is not None:
        st.applied += applied
        w.metrics.update_histogram(rt.learner.kind).observe_many(elapsed / applied, applied)
        w.faults.hit("after_learn", applied)


async def _handle(
    w: Worker,
    tp: TopicPartition,
    rec: Record,
    ev: Event | InvalidEvent,
    failed: dict[str, str],
) -> None:
    st = w.stats
    st.processed += 1
    if isinstance(ev, InvalidEvent):
        rt = w.models.get(ev.model) if ev.model and rec.key == ev.model.encode() else None
        if rt is not None and rt.foreign(tp.partition) is None:
            if rt.skips(tp.partition, rec.offset):
                st.skipped += 1
                return
            rt.counters.rejected += 1
            rt.stamp = Stamp(tp.partition, rec.offset, raw_event_id(rec.value))
            rt.dirty = True
        st.rejected += 1
        await w.deadletters.send(rec, ev.reason)
        return
    rt = w.models.get(ev.model)
    if ev.type == "created":
        await _created(w, tp, rec, ev)
        return
    if rt is None:
        st.rejected += 1
        reason = failed.get(ev.model) or f"unknown model {ev.model!r}"
        await w.deadletters.send(rec, reason)
        return
    if rt.home is not None and rt.foreign(tp.partition) is not None:
        await _forward(w, tp, rec, rt.home)  # learned there, in that partition's order
        return
    stale = _stale(rt, ev.incarnation)
    if stale is not None:  # changes nothing: neither learned nor counted against the model
        if rt.skips(tp.partition, rec.offset):
            st.skipped += 1
            return
        st.rejected += 1
        await w.deadletters.send(rec, stale)
        return
    if ev.type == "rollback":
        await w.rollback.handle(tp, rec, ev, rt)
        return
    started = perf_counter()
    outcome = rt.handle(ev, tp.partition, rec.offset)
    if outcome == APPLIED:
        w.metrics.update_histogram(rt.learner.kind).observe(perf_counter() - started)
        st.applied += 1
        w.faults.hit("after_learn")
    elif outcome == DUPLICATE:
        st.duplicate += 1
    elif outcome == SKIPPED:
        st.skipped += 1
    elif outcome == REJECTED:
        st.rejected += 1
        await w.deadletters.send(rec, rt.last_reason)


async def _created(w: Worker, tp: TopicPartition, rec: Record, ev: Event) -> None:
    """A model's creation marker. Not user data: never dead-lettered, never counted against
    a model. Its own incarnation's marker is covered by the origin stamp; another one that
    its stamp does not cover means the model was re-created while this worker held it, so
    the stored incarnation is loaded (docs/reliability.md, "Re-creating a model")."""
    w.stats.skipped += 1
    rt = w.models.get(ev.model)
    if rt is None or rt.covers(tp.partition, rec.offset) or rt.foreign(tp.partition):
        return
    if rt.origin is None or rt.origin.event_id != ev.id:
        await w.checkpoint.resync(ev.model, Stamp(tp.partition, rec.offset, ev.id))


def _quiet(what: str) -> None:
    pass


async def take(
    w: Worker, batch: Batch, generation: int, doing: Callable[[str], None] = _quiet
) -> None:
    """One polled ``batch``, fetched under ``generation``: dropped (its partitions sought
    back) when a rebalance or a seek happened since, else learned, then a checkpoint when
    one is due. Holds the lock against the rebalance callbacks."""
    async with w.lock:
        if generation != w.assignment.generation:
            w.assignment.refetch(batch)  # a rebalance or seek happened: stale records
            return
        doing("learning a batch")
        if batch:
            await process_batch(w, batch)
        if w.checkpoint.suspect or w.checkpoint.changed:
            doing("checking the log")
            await w.audit.check_log()
        if w.audit.due():
            doing("checking the store")
            await w.audit.check_store()
        if w.checkpoint.expired():
            doing("checkpointing")
            await w.checkpoint.commit()
            await w.audit.restore()


class Deadline:
    """The time left of the stop bound, shared out among the shutdown steps."""

    def __init__(self, w: Worker) -> None:
        self.clock = w.clock
        start = w.stopped_at if w.stopped_at is not None else w.clock()
        self.end = start + w.settings.worker_stop_timeout_s - EXIT_RESERVE_S

    def left(self, share: float = 1.0) -> float:
        return max(share * (self.end - self.clock()), MIN_STEP_S)


async def _final_checkpoint(w: Worker, deadline: Deadline) -> None:
    """Write the final checkpoint, within its share of the stop bound. Not writing it is
    safe (the events after the last one are replayed); the exit code says so."""
    budget = deadline.left(CHECKPOINT_SHARE)
    checkpoint = w.checkpoint

    async def write() -> None:
        async with w.lock:  # a rebalance callback may hold it
            await checkpoint.commit()
            await checkpoint.drain()

    writes = checkpoint.state_writes
    try:
        await asyncio.wait_for(write(), budget)
        w.final_checkpoint = True
    except TimeoutError:
        if checkpoint.state_writes > writes:  # in Redis; only the Kafka offset hint is late
            w.final_checkpoint = True
            logger.warning("final checkpoint written; its Kafka offset commit did not finish")
            return
        logger.error(
            "no final checkpoint: not written within %.1f s (Redis slow or down, or a"
            " rebalance in progress); its events will be replayed",
            budget,
        )
    except StoreUnavailable as exc:
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


async def _close_unstarted(w: Worker) -> None:
    await w.log.leave()
    await w.log.stop_probe()
    await w.log.stop_producer()
    await w.store.close()


def build_worker(
    settings: Settings, worker_id: str | None = None, *, stopping: asyncio.Event | None = None
) -> Worker:
    """A worker on the aiokafka log and the Redis store (not connected yet)."""
    wid = worker_id or default_worker_id()
    clock = time.monotonic
    stats = WorkerStats()
    stopping = stopping if stopping is not None else asyncio.Event()
    log = KafkaLog.from_settings(
        settings, f"onlinepredict-worker-{worker_id or default_worker_id()}"
    )
    store = RedisStore.from_settings(settings, wid, stats, stopping, clock)
    return Worker(
        settings,
        log,
        store,
        worker_id=wid,
        stats=stats,
        stopping=stopping,
        faults=Faults.from_env(),
        clock=clock,
    )


FETCHER_TURNS = 3


async def _let_the_fetcher_run() -> None:
    """Give aiokafka's fetcher the event-loop turns it needs (wake, plan, send) to put the
    next fetch on the wire before the batch's CPU work: it fetches a partition only once
    its buffer is drained, so without them the request left after the batch was learned
    and the worker then waited a round trip (frames at d = 100: +15-25% events/s,
    benchmarks/README.md)."""
    for _ in range(FETCHER_TURNS):
        await asyncio.sleep(0)


async def _poll(log: Log, max_records: int, stopped: asyncio.Future[None]) -> Batch | None:
    """One poll, or None when the stop comes first. ``getmany`` waits for an assignment
    whatever its timeout, so a worker stuck rejoining its group (a broker that keeps
    failing the group's sync) would never see the stop; records it had fetched but not
    handed out are dropped with the consumer, unacknowledged."""
    poll = asyncio.ensure_future(log.getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=max_records))
    await asyncio.wait((poll, stopped), return_when=asyncio.FIRST_COMPLETED)
    if poll.done():
        return poll.result()
    poll.cancel()
    await asyncio.gather(poll, return_exceptions=True)
    return None


class PhaseSink(Protocol):
    phase: str  # what the worker is doing, for the stop watchdog's log line


async def _until(event: asyncio.Event, seconds: float) -> None:
    """Returns when ``event`` is set or after ``seconds``, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


async def drain(
    w: Worker, seconds: float, hurry: asyncio.Event, doing: Callable[[str], None] = _quiet
) -> bool:
    """Learn on until every owned partition is learned to its end (``drain.Drain``), for at
    most ``seconds`` or until ``hurry`` is set; whether it got there. The caller then
    writes the final checkpoint as for any stop."""
    done = Drain(w.log, w.assignment, w.settings.events_topic, fetched_at=w.log.fetch_clock())
    end = w.clock() + seconds
    behind: dict[int, int | None] = {}
    while not hurry.is_set() and (left := end - w.clock()) > 0:
        doing("draining: learning to the end of the log")
        generation = w.assignment.generation
        cut = asyncio.ensure_future(_until(hurry, left))
        try:
            batch = await _poll(w.log, w.settings.max_poll_records, cut)
        finally:
            cut.cancel()
        if batch is None:
            break
        await take(w, batch, generation, doing)
        if not batch and not (behind := done.behind()):
            logger.info("drained: every owned partition learned to its end")
            return True
    logger.error(
        "not drained within ONLINEPREDICT_DRAIN_TIMEOUT_S=%.0f s%s; records left per"
        " partition (None: end unknown): %s",
        seconds,
        " (asked to hurry)" if hurry.is_set() else "",
        behind or done.behind(),
    )
    return False


async def run_worker(
    settings: Settings,
    *,
    stop: asyncio.Event | None = None,
    worker_id: str | None = None,
    phase: PhaseSink | None = None,
    drain_s: float = 0.0,
    hurry: asyncio.Event | None = None,
) -> Worker:
    """Consume until ``stop`` is set, then stop within ``settings.worker_stop_timeout_s``;
    returns the worker (its counters, and whether the final checkpoint was written).
    With ``drain_s`` > 0 it first learns to the end of the log for up to that long
    (``drain``; ``hurry`` cuts it short), and the stop bound runs from the drain's end."""
    w = build_worker(settings, worker_id, stopping=stop)
    log = w.log
    if w.stopping.is_set():  # asked to stop while starting: nothing learned, nothing to write
        w.final_checkpoint = True
        await _bounded("closing the clients", _close_unstarted(w), settings.worker_stop_timeout_s)
        logger.info("worker %s stopped while starting", w.worker_id)
        return w

    def doing(what: str) -> None:
        if phase is not None:
            phase.phase = what

    w.last_poll = w.clock()
    health = None
    if settings.worker_metrics_port:
        from service.worker.health import serve_health

        health = await serve_health(w, settings.worker_metrics_port, settings.worker_metrics_host)
    deadline: Deadline | None = None

    async def note_stop() -> None:  # the bound runs from the stop request
        await w.stopping.wait()
        w.stopped_at = w.clock()

    stop_watch = asyncio.ensure_future(note_stop())
    doing("loading the compiled kernels")
    # before joining the group, not on the first learned event: numba's import would stall
    # the first batch (and the group) for about half a second
    await asyncio.to_thread(learners.load_kernels)
    doing("connecting to the broker")
    await log.start()
    try:
        await log.subscribe(settings.events_topic, w.rebalance)
        logger.info("worker %s consuming %s", w.worker_id, settings.events_topic)
        try:
            while not w.stopping.is_set():
                doing("polling (or rebalancing)")
                w.last_poll = w.clock()
                generation = w.assignment.generation
                batch = await _poll(log, settings.max_poll_records, stop_watch)
                if batch is None:
                    break  # stopped while the poll waited (e.g. for a group rejoin)
                if batch:
                    await _let_the_fetcher_run()
                await take(w, batch, generation, doing)
            if drain_s > 0:
                w.drained = await drain(w, drain_s, hurry or asyncio.Event(), doing)
                w.stopped_at = w.clock()
            deadline = Deadline(w)
            doing("writing the final checkpoint")
            await _final_checkpoint(w, deadline)
        except StoreUnavailable as exc:
            logger.error("no final checkpoint: %s; its events will be replayed", exc)
        finally:
            deadline = deadline or Deadline(w)
            doing("leaving the consumer group")
            await _bounded("leaving the consumer group", log.leave(), deadline.left(LEAVE_SHARE))
    finally:
        deadline = deadline or Deadline(w)
        doing("flushing the producer")
        if health is not None:
            health.close()
        await _bounded("stopping the probe", log.stop_probe(), deadline.left(0.2))
        await _bounded("flushing the producer", log.stop_producer(), deadline.left())
        await _bounded("closing Redis", w.store.close(), deadline.left())
        stop_watch.cancel()
    logger.info(
        "worker %s stopped (%s final checkpoint): %s",
        w.worker_id,
        "with its" if w.final_checkpoint else "WITHOUT a",
        w.stats,
    )
    return w
