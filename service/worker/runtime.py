"""One model inside a worker: learner, running metrics, counters, stamp and seen ids;
``load_models`` builds them from the ``ModelStore``.

:meth:`ModelRuntime.handle` is the per-event online protocol: skip what the stamp covers,
drop a duplicate id, else ``learn`` (predict, score, update) and update the running
metrics. Every handled event (applied, duplicate or rejected) moves the in-memory stamp,
so its counters are checkpointed exactly once too.

Applying an event is all or nothing (the fault boundary, docs/reliability.md): whatever
goes wrong while learning it or updating the statistics (a rejected input, an overflow,
``LinAlgError``, a learner bug) or leaves a non-finite number behind puts the learner and
the statistics back exactly as they were before it, and the event is rejected with the
reason (the worker dead-letters it). Nothing a producer sends can stop a worker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from typing import Any

import numpy as np

import learners
from clients import wire
from learners.base import StepReport
from learners.codec import decode_state, encode_state
from service.metrics import figures
from service.metrics.guard import Refused, ScaleGuard
from service.metrics.running import RunningStats
from service.store.checkpoints import (
    CheckpointWrite,
    Counters,
    RollbackRecord,
    Stamp,
    StoredState,
    id_hash,
    new_token,
)
from service.store.registry import feature_names
from service.store.seen import SeenRecords, digest_ints, digests
from service.worker.events import Event
from service.worker.ports import ModelStore
from service.worker.seen import FEW, SeenWindow
from service.worker.undo import Undo, UnsafeState, check_finite

logger = logging.getLogger(__name__)

APPLIED, DUPLICATE, REJECTED, SKIPPED = "applied", "duplicate", "rejected", "skipped"
_MASK64 = (1 << 64) - 1
_SKIP, _DUP, _LEARN = 0, 1, 2  # handle_many's decisions, as codes in an array
_OUTCOMES = [(SKIPPED, ""), (DUPLICATE, ""), (APPLIED, "")]
_EVENT, _PARTITION, _OFFSET = itemgetter(0), itemgetter(1), itemgetter(2)
_ID = attrgetter("id")


@dataclass
class ModelRuntime:
    model: str
    spec: dict[str, Any]
    learner: learners.Learner
    stats: RunningStats
    counters: Counters = field(default_factory=Counters)
    version: int = 0  # the stored version this runtime descends from
    token: str = ""  # that version's write token (checked with it: reissued numbers differ)
    stamp: Stamp | None = None  # last handled event
    seen_keep: int = 10_000
    # the dedupe window: digests of the last ``seen_keep`` applied ids (service/worker/seen.py)
    seen: SeenWindow = field(init=False)
    dirty: bool = False
    rewind: bool = False  # the stored stamp was void: the next write may go backwards
    last_reason: str = ""
    # the last rollback control event decided (docs/checkpoints.md): rollback events at or
    # below it on its partition are re-deliveries after the seek-back and are skipped
    barrier: Stamp | None = None
    # after a rollback: the applied count restored (its window replaces the stored one)
    unsee_above: int | None = None
    # an undoing rollback decided, to list with the next write (service/worker/rollback.py)
    listing: RollbackRecord | None = None
    # the spec's incarnation and origin (the ``created`` marker): "" / None for a spec made
    # before incarnations (docs/reliability.md, "Re-creating a model")
    incarnation: str = ""
    origin: Stamp | None = None
    # why the model stopped learning (its log diverged beyond what it can tell apart,
    # service/worker/divergence.py); its examples are skipped until a rollback or a new
    # incarnation, its stamp stays where it is
    halted: str | None = None
    # the counters (applied, rejected) it was loaded with: the recent refused share counts
    # from there (service/worker/refusals.py)
    loaded_counts: tuple[int, int] = (0, 0)
    _features: dict[str, int] | None = None  # the spec's feature name -> position, once used

    def __post_init__(self) -> None:
        self.seen = SeenWindow(self.seen_keep)

    @property
    def evicted(self) -> int:
        """Ids that left the window in this process: re-sent now, learned again."""
        return self.seen.evicted

    @property
    def home(self) -> int | None:
        """The partition the model lives on: its origin's, else its stamp's (a model made
        before home partitions), else None (nothing learned yet)."""
        ref = self.origin or self.stamp
        return ref.partition if ref is not None else None

    def foreign(self, partition: int) -> str | None:
        """Why an event on ``partition`` cannot be applied (not the model's home), or None.
        Such an event changes nothing, the per-model counters included: it is not covered
        by the model's stamp, so it would be counted again on every replay."""
        home = self.home
        if home is None or home == partition:
            return None
        return (
            f"model {self.model!r} lives on partition {home} of the events topic (its home"
            f" since creation); this event came on partition {partition}: re-send it to"
            f' partition {home} (docs/reliability.md, "Partitions")'
        )

    @classmethod
    def create(
        cls,
        spec: dict[str, Any],
        stored: StoredState | None,
        seen: SeenRecords | Sequence[str],
        *,
        seen_keep: int,
    ) -> ModelRuntime:
        """Build from the spec, then restore the checkpoint when there is one, with its
        stored seen window (or a list of ids, oldest first, counted as the last applied).

        Raises ``ValueError`` (bad spec or undecodable state) with a readable message.
        """
        model = str(spec["id"])
        incarnation = str(spec.get("incarnation", ""))
        raw_origin = spec.get("origin")
        origin = (
            Stamp(int(raw_origin["partition"]), int(raw_origin["offset"]), raw_origin["event_id"])
            if isinstance(raw_origin, dict)
            else None
        )
        if stored is None:
            kind, dim, pre = str(spec["kind"]), int(spec["dim"]), spec.get("preprocess")
            learner = learners.build(kind, dim, pre, **spec.get("params", {}))
            stats = RunningStats(learner.task, learner.dim)
            stats.scale = ScaleGuard.for_kind(kind, learner.task, learner.dim)
            # a new incarnation covers everything up to its creation marker
            return cls(
                model,
                spec,
                learner,
                stats,
                seen_keep=seen_keep,
                stamp=origin,
                incarnation=incarnation,
                origin=origin,
            )
        learner = learners.load_state(decode_state(stored.state))
        stats = (
            RunningStats.from_state(decode_state(stored.stats))
            if stored.stats
            else RunningStats(learner.task, learner.dim)
        )
        if stats.scale is None:  # a checkpoint from before the guard: a new warm-up
            stats.scale = ScaleGuard.for_kind(learner.kind, learner.task, learner.dim)
        rt = cls(
            model,
            spec,
            learner,
            stats,
            counters=Counters(**vars(stored.counters)),
            version=stored.version,
            token=stored.token,
            stamp=stored.stamp,
            seen_keep=seen_keep,
            barrier=stored.barrier,
            incarnation=incarnation,
            origin=origin,
            loaded_counts=(stored.counters.applied, stored.counters.rejected),
        )
        if not isinstance(seen, SeenRecords):
            ids = list(seen)
            last = rt.counters.applied
            applied = np.arange(last - len(ids) + 1, last + 1, dtype=np.int64)
            seen = SeenRecords(applied, digests(ids))
        rt.seen = SeenWindow.load(seen_keep, seen, time.time())
        return rt

    def covers(self, partition: int, offset: int) -> bool:
        """True when the state already includes the event at (partition, offset)."""
        s = self.stamp
        return s is not None and s.partition == partition and offset <= s.offset

    def skips(self, partition: int, offset: int) -> bool:
        """The event at (partition, offset) changes nothing: its stamp covers it, or the
        model stopped learning (divergence.py; its stamp stays where it stopped)."""
        return self.halted is not None or self.covers(partition, offset)

    def pass_over(self, stamp: Stamp, *, barrier: bool = False) -> None:
        """Move the stamp onto an event decided without learning (a refused or repeated
        rollback): checkpointed once, never decided again; ``barrier`` also makes it the
        last rollback decided. A halted model's stamp stays where it stopped."""
        if self.halted is None:
            self.stamp, self.dirty = stamp, True
            if barrier:
                self.barrier = stamp

    def handle(self, event: Event, partition: int, offset: int) -> str:
        if self.skips(partition, offset):
            return SKIPPED
        foreign = self.foreign(partition)
        if foreign is not None:
            self.last_reason = foreign
            return REJECTED
        self.stamp = Stamp(partition, offset, event.id)
        self.dirty = True
        digest = id_hash(event.id)
        if digest in self.seen:
            self.counters.duplicate += 1
            return DUPLICATE
        if event.type == "register":
            return self._register(event)
        try:
            x = self._vector(event)
        except ValueError as exc:
            return self._reject(f"model {self.model!r} rejected the event: {exc}")
        undo = Undo(self.learner, self.stats)
        refused = self.guard(x, event.y)
        if refused is not None:
            return self._reject(refused)
        try:
            report = self.learner.learn(x, event.y, hint=event.hint)
        except ValueError as exc:  # the base validates before touching state
            undo.restore(self)  # a no-op unless a step broke that contract
            return self._reject(f"model {self.model!r} rejected the event: {exc}")
        except Exception as exc:  # overflow, a learner bug: same path, state put back
            return self._fault(undo, "learning", exc)
        try:
            self.stats.update(
                np.asarray(x, dtype=np.float64),
                event.y,
                report.prediction,
                report.loss,
                report.diagnostics,
            )
            check_finite(undo, self.learner, self.stats)
        except Exception as exc:
            return self._fault(undo, "scoring", exc)
        self._applied(event.id, digest)
        return APPLIED

    def handle_many(self, items: Sequence[tuple[Event, int, int]]) -> list[tuple[str, str]]:
        """``handle`` on each ``(event, partition, offset)`` in order, with every event that
        is learned going through one ``learner.learn_many`` call: the same outcomes,
        counters, seen ids, stamp, statistics and learner state as the loop of ``handle``.

        Only example events (no control events). Returns ``(outcome, reason)`` per item;
        the reason is set for rejected ones.

        The loop's decisions are made up front, side-effect free: skipped (stamp), duplicate
        (the seen-id window as it will be when the event's turn comes, evictions by the
        events learned before it included), else learned. When anything goes wrong with the
        batch (``learn_many`` refuses it or stops part-way, the statistics fail, a value
        turns non-finite), the model is put back as it was and the whole group goes through
        ``handle`` one by one, which finds and rejects the bad events. A group longer than
        the seen window is handled in slices of that length, one after the other: the plan
        assumes no id enters and leaves the window within it, and event by event a poll
        longer than the window learned at half the rate (benchmarks/README.md, "Larger polls").
        """
        if self.halted is not None:
            return [(SKIPPED, "")] * len(items)
        foreign = self.foreign(items[0][1]) if items else None
        if foreign is not None:  # a group is one partition's
            return [(REJECTED, foreign) for _ in items]
        keep = self.seen_keep
        if keep and len(items) > keep:  # the window would turn over within one plan
            return [
                out
                for at in range(0, len(items), keep)
                for out in self.handle_many(items[at : at + keep])
            ]
        codes, learn, learned = self._plan(items)
        if learn:
            todo = (
                list(map(_EVENT, items))
                if len(learn) == len(items)
                else [items[i][0] for i in learn]
            )
            undo = Undo(self.learner, self.stats)
            try:  # ragged rows (a wrong dimension) fail in np.array already
                rows = [e.x for e in todo]
                if dict in set(map(type, rows)):  # named x; an unknown name raises here
                    rows = [self._vector(e) for e in todo]
                X = np.array(rows, dtype=np.float64)
                if self.stats.scale is not None:  # a refused row: the per-event path says why
                    self.stats.scale.admit_many(X, [e.y for e in todo])
                reports = self._learn_batch(X, todo)
                self.stats.update_many(X, [e.y for e in todo], reports)
                check_finite(undo, self.learner, self.stats)
            except Exception:  # a fault in the batch: find it event by event
                undo.restore(self)
                return [self._one(*item) for item in items]
        return self._settle(items, codes, learned)

    def _plan(
        self, items: Sequence[tuple[Event, int, int]]
    ) -> tuple[list[int], list[int], np.ndarray | list[int]]:
        """The decisions (codes), the positions of the events to learn and their digests."""
        if len(items) <= FEW:
            return self._plan_few(items)
        decided, digest = self._decide(items)
        at = np.flatnonzero(decided == _LEARN)
        return decided.tolist(), at.tolist(), digest[at]

    def _plan_few(
        self, items: Sequence[tuple[Event, int, int]]
    ) -> tuple[list[int], list[int], list[int]]:
        """``_plan`` for a few events, with lists (array set-up would cost more than it
        saves); skipped events are not hashed."""
        s = self.stamp
        if s is None:
            live = list(range(len(items)))
        else:  # ``covers``, inline
            sp, so = s.partition, s.offset
            live = [i for i, (_, p, o) in enumerate(items) if p != sp or o > so]
        keys = digest_ints([items[i][0].id for i in live])
        dup = self.seen.duplicates_in_order(keys) if self.seen_keep else [False] * len(keys)
        codes = [_SKIP] * len(items)
        learn: list[int] = []
        learned: list[int] = []
        for i, key, is_dup in zip(live, keys, dup, strict=True):
            if is_dup:
                codes[i] = _DUP
            else:
                codes[i] = _LEARN
                learn.append(i)
                learned.append(key)
        return codes, learn, learned

    def _settle(
        self,
        items: Sequence[tuple[Event, int, int]],
        codes: list[int],
        learned: np.ndarray | list[int],
    ) -> list[tuple[str, str]]:
        """After the events to learn are learned: counters, window and stamp; outcomes."""
        if len(learned):
            self._applied_many(learned)
        self.counters.duplicate += codes.count(_DUP)
        for i in range(len(codes) - 1, -1, -1):  # the stamp after the decided events
            if codes[i] != _SKIP:
                event, partition, offset = items[i]
                self._moved((partition, offset, event.id))
                break
        return [_OUTCOMES[c] for c in codes]

    def _decide(self, items: Sequence[tuple[Event, int, int]]) -> tuple[np.ndarray, np.ndarray]:
        """The loop's decisions for the batch, side-effect free, and the ids' digests:
        skipped (the stamp covers it), duplicate (in the seen window as it will be at the
        event's turn, evictions by the events learned before it included) or to learn."""
        n = len(items)
        digest = digests(map(_ID, map(_EVENT, items)))
        codes = np.full(n, _LEARN, dtype=np.int8)
        s = self.stamp
        if s is not None:
            if set(map(_PARTITION, items)) == {s.partition}:  # the usual: one partition's
                offsets = np.fromiter(map(_OFFSET, items), np.int64, n)
                codes[offsets <= s.offset] = _SKIP
            else:
                codes[[self.covers(p, o) for _, p, o in items]] = _SKIP
        live_at = np.flatnonzero(codes != _SKIP)
        if self.seen_keep and len(live_at):
            codes[live_at[self.seen.duplicates(digest[live_at])]] = _DUP
        return codes, digest

    def guard(self, x: Any, y: Any) -> str | None:
        """The scale guard's refusal of the row (service/metrics/guard.py), or None: its
        running scales then include the row (the caller's undo puts them back when the
        learner refuses it after all)."""
        g = self.stats.scale
        if g is None:
            return None
        try:
            g.admit(np.asarray(x, dtype=np.float64), y)
        except Refused as exc:
            return f"model {self.model!r} refused the event: {exc.reason}"
        except (TypeError, ValueError, ArithmeticError):
            return None  # not numbers the guard can read: the learner refuses it, saying why
        return None

    def _vector(self, event: Event) -> list[float]:
        """The event's ``x`` as a list: an object (named x, docs/events.md §1) mapped by the
        spec's ``features``. ``ValueError`` naming what does not fit."""
        x = event.x
        if type(x) is not dict:
            return x  # type: ignore[return-value]
        if self._features is None:
            names = feature_names(self.spec)
            if names is None:
                raise ValueError(wire.no_features(int(self.spec["dim"])))
            self._features = wire.feature_index(names)
        return wire.dense(x, self._features)

    def _learn_batch(self, X: np.ndarray, todo: list[Event]) -> Sequence[StepReport]:
        """``learn_many`` on the rows. Any failure (a refused batch, a step that stopped
        part-way, whose own state cannot be trusted) raises: the caller puts the model back
        and the per-event path finds the bad event."""
        hints = [e.hint for e in todo]
        return self.learner.learn_many(
            X, [e.y for e in todo], hints=None if hints.count(None) == len(hints) else hints
        )

    def _moved(self, last: tuple[int, int, str] | None) -> None:
        """The stamp after the events decided so far."""
        if last is not None:
            self.stamp = Stamp(*last)
            self.dirty = True

    def _one(self, event: Event, partition: int, offset: int) -> tuple[str, str]:
        outcome = self.handle(event, partition, offset)
        return outcome, self.last_reason if outcome == REJECTED else ""

    def _register(self, event: Event) -> str:
        """A transductive block (docs/events.md §3): ``learner.register(vectors)``."""
        register = getattr(self.learner, "register", None)
        if register is None:
            return self._reject(
                f"model {self.model!r} (kind {self.learner.kind}) does not take block registration"
            )
        undo = Undo(self.learner, self.stats)
        try:
            register(event.vectors)
        except ValueError as exc:  # the learner leaves its state untouched
            undo.restore(self)
            return self._reject(f"model {self.model!r} refused the block: {exc}")
        except Exception as exc:
            return self._fault(undo, "registering the block", exc)
        try:
            check_finite(undo, self.learner, self.stats)
        except UnsafeState as exc:
            return self._fault(undo, "registering the block", exc)
        self._applied(event.id)
        return APPLIED

    def _fault(self, undo: Undo, during: str, exc: BaseException) -> str:
        """An event that failed after validation: put the model back as it was before it,
        and reject the event with what happened."""
        undo.restore(self)
        what = str(exc) if isinstance(exc, UnsafeState) else f"{type(exc).__name__}: {exc}"
        logger.warning("model %r: event rejected while %s: %s", self.model, during, what)
        return self._reject(
            f"model {self.model!r} could not apply the event ({during} failed: {what[:300]});"
            " the model is unchanged"
        )

    def _reject(self, reason: str) -> str:
        self.counters.rejected += 1
        self.last_reason = reason
        return REJECTED

    def _applied(self, event_id: str, digest: int | None = None) -> None:
        c = self.counters
        h = id_hash(event_id) if digest is None else digest
        c.applied += 1
        c.ids_sum = (c.ids_sum + h) & _MASK64
        if self.seen_keep:
            self.seen.add_one(h, c.applied, time.time())

    def _applied_many(self, digest: np.ndarray | list[int]) -> None:
        """``_applied`` for ids learned in order, given their digests."""
        c = self.counters
        first = c.applied + 1
        c.applied += len(digest)
        total = sum(digest) if isinstance(digest, list) else int(digest.sum(dtype=np.uint64))
        c.ids_sum = (c.ids_sum + total) & _MASK64
        if self.seen_keep:
            self.seen.add(digest, range(first, c.applied + 1), time.time())

    def dedupe_horizon(self, now: float) -> tuple[int, float]:
        """The dedupe horizon (docs/reliability.md, "Duplicates"): an id re-sent is dropped
        while it is among the last ``seen_keep`` ids applied; that is the window's size in
        ids, and how long ago its oldest id was applied, in seconds."""
        oldest = self.seen.oldest_time()
        if oldest is None:
            return 0, 0.0
        return len(self.seen), max(0.0, now - oldest)

    def checkpoint_write(self, topic: str) -> CheckpointWrite:
        assert self.stamp is not None
        if self.unsee_above is not None:  # after a rollback: the window is N's, stored whole
            self.seen.reset = True
        seen, whole = self.seen.for_write()
        return CheckpointWrite(
            model=self.model,
            topic=topic,
            stamp=self.stamp,
            state=encode_state(self.learner.state()),
            counters=Counters(**vars(self.counters)),
            expected_version=self.version,
            token=new_token(),
            expected_token=self.token,
            stats=encode_state(self.stats.state()),
            figures=figures.encode(
                figures.of_model(self.stats, self.learner, feature_names(self.spec))
            ),
            seen=seen,
            seen_whole=whole,
            rewind=self.rewind,
            barrier=self.barrier,
            incarnation=self.incarnation,
            rollback=self.listing,
        )

    def written(self, version: int, token: str) -> None:
        self.version, self.token = version, token
        self.seen.written()
        self.dirty = False
        self.rewind = False
        self.unsee_above = None
        self.listing = None


def unknown_model_reason(model: str) -> str:
    return f"unknown model {model!r}: create it first (POST /v1/models)"


async def load_models(
    store: ModelStore, ids: Iterable[str], *, seen_keep: int
) -> tuple[dict[str, ModelRuntime], dict[str, str]]:
    """Runtimes for ``ids`` (spec + latest checkpoint + seen ids, one store round) and, for
    those that cannot be loaded, the reason."""
    ids = list(ids)
    stored = await store.load(ids)
    loaded: dict[str, ModelRuntime] = {}
    failed: dict[str, str] = {}
    for m in ids:
        if m not in stored.specs:
            failed[m] = unknown_model_reason(m)
            continue
        try:
            loaded[m] = ModelRuntime.create(
                stored.specs[m],
                stored.states.get(m),
                stored.seen.get(m, []),
                seen_keep=seen_keep,
            )
        except (ValueError, TypeError, KeyError) as exc:
            failed[m] = f"cannot load model {m!r}: {exc}"
            logger.error("%s", failed[m])
    return loaded, failed
