"""The simulated cluster: a broker, a store, up to ``SLOTS`` workers in one consumer group,
the stream, a virtual clock and the fault schedule, stepped by one ``random.Random``.

Each worker is the real ``Worker`` (``service.worker.loop``) on the in-memory adapters; a
step is one iteration of ``run_worker``'s loop (poll, then ``take``), run as an asyncio task
that may stop at a gate (a pause, an outage) while the others go on. Nothing sleeps: time is
``World.now``, moved by the scheduler. Group rebalances follow the eager protocol (every
member revokes everything, then each is assigned its share).
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from typing import Any

from service.config import Settings
from service.worker.adapters.memory_log import MemoryBroker
from service.worker.adapters.memory_store import MemoryStore
from service.worker.loop import POLL_TIMEOUT_MS, Deadline, Worker, _final_checkpoint, take
from service.worker.ports import TopicPartition
from tests.sim.faults import Fault
from tests.sim.ports import SimCrash, SimLog, SimStore
from tests.sim.stream import TOPIC, Stream

SLOTS = 3
BASE = Settings(
    events_topic=TOPIC,
    deadletter_topic="dead",
    commit_interval_s=1.0,
    worker_stop_timeout_s=20.0,
)
BROKER_CALLS = ("log.produce", "log.beginning_offset", "log.committed")


class Node:
    """One worker process (a restart is a new Node in the same slot)."""

    def __init__(self, world: World, slot: int, name: str) -> None:
        self.world = world
        self.slot = slot
        self.name = name
        self.log = SimLog(world.broker, self)
        self.worker = Worker(
            world.settings, self.log, SimStore(world.store, self), worker_id=name, clock=world.clock
        )
        self.member = False
        self.dead = False
        self.task: asyncio.Future[Any] | None = None
        self.blocked_fut: asyncio.Future[None] | None = None
        self.blocked_on: str | None = None
        self.calls = 0
        self.crash_at: int | None = None
        self.crash_after = False
        self.pause_at: int | None = None
        self.paused = False
        self.in_step = False

    async def gate(self, name: str) -> None:
        self.calls += 1
        if self.crash_at == self.calls and not self.crash_after:
            raise SimCrash(f"{self.name} before {name}")
        if self.pause_at == self.calls and self.in_step:
            self.paused, self.pause_at = True, None
            self.world.note(f"{self.name} paused at {name}")
        while self.world.closed(self, name):
            self.blocked_on = name
            if self.blocked_fut is not None and not self.blocked_fut.done():
                self.blocked_fut.set_result(None)
            await self.world.wake.wait()
        self.blocked_on = None

    def after(self, name: str) -> None:
        if self.crash_at == self.calls and self.crash_after:
            raise SimCrash(f"{self.name} after {name}")


class World:
    def __init__(self, seed: int, faults: list[Fault], frames: bool = False) -> None:
        rng = random.Random(f"world:{seed}")
        self.partitions = rng.randint(2, 4)
        self.steps = rng.randint(120, 240)
        self.settings = BASE.model_copy(
            update={
                "commit_every": rng.randint(2, 30),
                "max_poll_records": rng.randint(2, 25),
                "seen_ids_keep": rng.choice((10, 20, 50, 10_000)),
                "history_keep": rng.choice((3, 10)),
            }
        )
        self.now = 0.0
        self.broker = MemoryBroker({TOPIC: self.partitions})
        self.store = MemoryStore(
            worker_id="sim",
            history_keep=self.settings.history_keep,
            seen_keep=self.settings.seen_ids_keep,
            clock=self.clock,
        )
        self.stream = Stream(seed, self.broker, self.store, self.partitions, frames)
        self.stream.on_spec_change = self.snapshot_reset
        self.stream.resend = self.settings.seen_ids_keep >= 10_000
        self.sched = random.Random(f"sched:{seed}")
        self.initial = rng.randint(1, SLOTS)
        self.faults = faults
        self.slots: list[Node | None] = [None] * SLOTS
        self.born = 0
        self.wake = asyncio.Event()
        self.store_down = self.broker_down = False
        self.store_up_at = self.broker_up_at = 0
        self.resume_at: dict[int, int] = {}  # slot -> step
        self.need_rebalance = False
        self.snapshots: deque[tuple[Any, ...]] = deque(maxlen=8)
        self.trace: list[str] = []
        self.violations: list[str] = []
        self.lost_writes = 0
        self.step = 0
        self.strict_drain = False

    def clock(self) -> float:
        return self.now

    def note(self, what: str) -> None:
        self.trace.append(f"{self.step}: {what}")

    def closed(self, node: Node, name: str) -> bool:
        if name == "log.commit":
            return False  # the background offset commit: fails instead (ports.SimLog)
        if node.paused:
            return True
        if name.startswith("store."):
            return self.store_down
        return self.broker_down and name in BROKER_CALLS

    def changed(self) -> None:
        self.wake.set()
        self.wake = asyncio.Event()

    def nodes(self) -> list[Node]:
        return [n for n in self.slots if n is not None]

    def members(self) -> list[Node]:
        return [n for n in self.nodes() if n.member]

    # --- the store's durability: what an AOF would hold -------------------------------------
    def snapshot(self) -> None:
        s = self.store
        self.snapshots.append(
            (
                dict(s.specs),
                dict(s.states),
                {m: list(h) for m, h in s.histories.items()},
                {m: dict(v) if isinstance(v, dict) else v for m, v in s.seen.items()},
                {k: set(v) for k, v in s.partition_lists.items()},
                dict(s.halted),
                {m: dict(v) for m, v in s.rollbacks_of.items()},
            )
        )

    def snapshot_reset(self) -> None:
        """A spec change is never lost (docs/reliability.md: a creation Redis loses is a
        model that was never created): the store cannot go back past it."""
        self.snapshots.clear()
        self.snapshot()

    def lose_suffix(self, k: int) -> None:
        """The last ``k`` writes are gone: back to an earlier snapshot, all keys together."""
        for _ in range(min(k, len(self.snapshots) - 1)):
            self.snapshots.pop()
            self.lost_writes += 1
        specs, states, history, seen, lists, halted, rollbacks = self.snapshots[-1]
        s = self.store
        s.specs, s.states, s.halted = dict(specs), dict(states), dict(halted)
        s.rollbacks_of = {m: dict(v) for m, v in rollbacks.items()}
        s.histories = {m: list(h) for m, h in history.items()}
        s.seen = {m: dict(v) if isinstance(v, dict) else v for m, v in seen.items()}
        s.partition_lists = {key: set(v) for key, v in lists.items()}
        s.run += 1  # a restarted Redis (or the replica that took over) has a new run_id

    # --- workers ------------------------------------------------------------------------------
    async def spawn(self, slot: int) -> None:
        self.born += 1
        node = Node(self, slot, f"w{slot}.{self.born}")
        self.slots[slot] = node
        await node.log.start()
        await node.log.subscribe(TOPIC, node.worker.rebalance)
        node.member = True
        self.need_rebalance = True
        self.note(f"{node.name} joined")

    def kill(self, node: Node, why: str) -> None:
        node.dead, node.member = True, False
        for fut in (node.task, node.worker.checkpoint.inflight):
            if fut is not None and not fut.done():
                fut.cancel()
            elif fut is not None and not fut.cancelled():
                fut.exception()  # retrieved: it died with the process
        node.task = None
        self.slots[node.slot] = None
        self.need_rebalance = True
        self.note(f"{node.name} died: {why}")

    async def wait_task(self, node: Node) -> None:
        """Run the node's task until it ends or stops at a closed gate."""
        assert node.task is not None
        if not node.task.done():
            node.blocked_fut = asyncio.get_running_loop().create_future()
            await asyncio.wait({node.task, node.blocked_fut}, return_when=asyncio.FIRST_COMPLETED)
            node.blocked_fut = None
        if not node.task.done():
            return
        task, node.task, node.in_step = node.task, None, False
        if task.cancelled():
            return
        exc = task.exception()
        if isinstance(exc, SimCrash):
            self.kill(node, str(exc))
            await self.spawn(node.slot)  # the process manager restarts it
        elif exc is not None:
            self.violations.append(f"{node.name} raised {type(exc).__name__}: {exc}")
            self.kill(node, repr(exc))
            await self.spawn(node.slot)

    def can_run(self, node: Node) -> bool:
        return node.blocked_on is None or not self.closed(node, node.blocked_on)

    async def poll_once(self, node: Node) -> None:
        """One iteration of ``run_worker``'s loop."""
        w = node.worker
        generation = w.assignment.generation
        batch = await node.log.getmany(
            timeout_ms=POLL_TIMEOUT_MS, max_records=w.settings.max_poll_records
        )
        await take(w, batch, generation)

    async def advance(self, node: Node) -> None:
        if node.dead:
            return
        if node.task is None:
            if not node.member:
                return
            node.in_step = True
            node.task = asyncio.ensure_future(self.poll_once(node))
        if self.can_run(node):
            await self.wait_task(node)

    async def callback(self, node: Node, coro: Any) -> bool:
        """Run ``coro`` (a rebalance callback, a shutdown step) as the node's task."""
        assert node.task is None
        node.task = asyncio.ensure_future(coro)
        await self.wait_task(node)
        if node.task is not None:  # it stopped at a gate: let it finish later
            return False
        return not node.dead

    async def rebalance(self) -> None:
        for _ in range(50):
            if self.store_down or self.broker_down:
                return
            members = self.members()
            if any(n.task is not None for n in members):
                return  # a member is busy: the group waits for its poll
            parts = self.broker.partitions(TOPIC)
            ok = True
            for n in members:
                ok = ok and await self.callback(n, n.log.rebalance([]))
            for k, n in enumerate(members):
                mine = [tp for i, tp in enumerate(parts) if i % len(members) == k]
                ok = ok and await self.callback(n, n.log.rebalance(mine))
            if ok:
                self.need_rebalance = False
                self.note("rebalanced: " + ", ".join(n.name for n in members))
                return
        self.violations.append("the group never settled (crashes in every rebalance)")

    async def settle(self) -> None:
        """Collect what ended, take paused workers out of the group, let resumed zombies
        finish and rejoin, and rebalance when the group changed."""
        for node in self.nodes():
            if node.paused and node.member:
                node.member = False  # its session timed out
                self.need_rebalance = True
            if node.task is not None and node.task.done():
                await self.wait_task(node)
            if not node.dead and not node.member and not node.paused and node.task is None:
                node.member = True  # the resumed zombie polls again: it rejoins
                self.need_rebalance = True
        if self.need_rebalance:
            for node in self.members():
                if node.task is not None and self.can_run(node):
                    await self.wait_task(node)
            await self.rebalance()

    # --- faults -------------------------------------------------------------------------------
    async def apply(self, f: Fault) -> None:
        node = self.slots[f.a] if f.kind in ("crash", "pause", "leave") else None
        self.note(f"fault {f}")
        if f.kind == "crash" and node is not None:
            node.crash_at, node.crash_after = node.calls + f.b, bool(f.c)
        elif f.kind == "pause" and node is not None and node.member:
            node.pause_at = node.calls + f.b
            self.resume_at[f.a] = self.step + f.c
        elif f.kind == "join":
            free = [i for i, n in enumerate(self.slots) if n is None]
            if free:
                await self.spawn(free[0])
        elif f.kind == "leave" and node is not None:
            await self.leave(node)
        elif f.kind == "redis_loss":
            self.lose_suffix(f.a)
        elif f.kind == "store_down":
            self.store_down, self.store_up_at = True, max(self.store_up_at, self.step + f.a)
        elif f.kind == "broker_down":
            self.broker_down, self.broker_up_at = True, max(self.broker_up_at, self.step + f.a)
        elif f.kind == "truncate":
            tp = TopicPartition(TOPIC, f.a % self.partitions)
            cut = max(self.broker.begin[tp], self.broker.end(tp) - f.b)
            del self.broker.records[tp][cut - self.broker.begin[tp] :]  # the lost tail

    async def leave(self, node: Node) -> None:
        """A graceful stop: ``run_worker``'s final checkpoint, then leaving the group."""
        if node.task is not None or not node.member or self.store_down or self.broker_down:
            return  # busy or cut off: it will be stopped another time
        w = node.worker
        if await self.callback(node, _final_checkpoint(w, Deadline(w))):
            if await self.callback(node, node.log.leave()):
                self.kill(node, "left")

    def heal(self, *, all_: bool = False) -> None:
        if self.store_down and (all_ or self.step >= self.store_up_at):
            self.store_down = False
        if self.broker_down and (all_ or self.step >= self.broker_up_at):
            self.broker_down = False
        for slot, at in list(self.resume_at.items()):
            node = self.slots[slot]
            if all_ or self.step >= at:
                del self.resume_at[slot]
                if node is not None:
                    node.paused, node.pause_at = False, None
        if all_:
            for node in self.nodes():
                node.crash_at = node.pause_at = None
                node.paused = False
        self.changed()
