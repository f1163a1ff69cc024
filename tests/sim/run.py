"""One seed: build the world, run the schedule, drain without faults, check; and shrinking."""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field

from service.worker.loop import Deadline, _final_checkpoint
from tests.sim import oracle
from tests.sim.faults import Fault, make_schedule
from tests.sim.stream import TOPIC
from tests.sim.world import SLOTS, World

DRAIN_ROUNDS = 300


@dataclass
class Result:
    seed: int
    faults: list[Fault]
    violations: list[str] = field(default_factory=list)
    events: int = 0
    lost_writes: int = 0
    trace: list[str] = field(default_factory=list)
    digest: int = 0


def schedule_of(seed: int, truncation: bool = False) -> list[Fault]:
    rng = random.Random(f"world:{seed}")  # the same draws World makes first
    partitions, steps = rng.randint(2, 4), rng.randint(120, 240)
    return make_schedule(seed, steps, SLOTS, partitions, truncation)


async def _run(world: World) -> None:
    for m in world.stream.models:
        world.stream.create(m, at_once=True)
    for slot in range(world.initial):
        await world.spawn(slot)
    await world.rebalance()
    by_step: dict[int, list[Fault]] = {}
    for f in world.faults:
        by_step.setdefault(f.step, []).append(f)
    sched = world.sched
    for step in range(world.steps):
        world.step = step
        for f in by_step.get(step, []):
            await world.apply(f)
        world.heal()
        await world.settle()
        world.now += sched.choice((0.05, 0.1, 0.2, 0.4))
        if sched.random() < 0.3:
            world.stream.act()
            continue
        runnable = [n for n in world.nodes() if n.member or n.task is not None]
        if runnable:
            await world.advance(sched.choice(runnable))
    await _drain(world)


def _consumed(world: World) -> bool:
    owners = {}
    for n in world.members():
        for tp in n.log.assignment():
            owners[tp] = n
    for tp in world.broker.partitions(TOPIC):
        n = owners.get(tp)
        if n is None or n.worker.assignment.next_offset.get(tp, -1) < world.broker.end(tp):
            return False
    return True


async def _drain(world: World) -> None:
    """No more faults: every worker finishes, every partition is consumed and every
    member writes its final checkpoint."""
    world.step = world.steps
    world.heal(all_=True)
    world.stream.finish_pending()
    if not world.strict_drain:
        # A store that lost its last writes is noticed at a model's next checkpoint write
        # (the version check); a model with no event after the loss keeps the older state
        # until one comes (or its partition is reassigned): --strict-drain shows it.
        world.stream.tail()
    start = world.now
    for _ in range(DRAIN_ROUNDS):
        world.now += 0.5
        await world.settle()
        if not world.members():
            await world.spawn(0)
            continue
        if world.need_rebalance:
            continue
        for n in world.members():
            await world.advance(n)
        if not _consumed(world) or any(n.task is not None for n in world.nodes()):
            continue
        if world.now - start <= world.settings.commit_interval_s:
            continue  # every worker checks the store's epoch once after the faults
        for n in world.members():
            await world.callback(n, _final_checkpoint(n.worker, Deadline(n.worker)))
        if _consumed(world) and not any(n.worker.checkpoint.pending for n in world.members()):
            return
    world.violations.append(f"not drained after {DRAIN_ROUNDS} rounds")


def run_seed(
    seed: int,
    faults: list[Fault] | None = None,
    truncation: bool = False,
    strict_drain: bool = False,
    frames: bool = False,
) -> Result:
    faults = schedule_of(seed, truncation) if faults is None else faults
    world_box: list[World] = []

    async def main() -> None:
        world = World(seed, faults, frames)
        world.strict_drain = strict_drain
        world_box.append(world)
        await _run(world)

    quiet = logging.getLogger("service")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the worker's warnings, thousands per run
    try:
        asyncio.run(main())
    finally:
        quiet.setLevel(level)
    world = world_box[0]
    res = Result(seed, faults, list(world.violations), world.stream.produced, world.lost_writes)
    res.trace = world.trace
    deleted = [m.id for m in world.stream.models if not m.live]
    if truncation:
        res.violations += oracle.check_truncated(
            world.store, world.stream.history, world.broker, TOPIC
        )
    else:
        res.violations += oracle.check(world.broker, world.store, TOPIC, deleted)
    res.digest = hash(
        tuple((m, s.version, s.state, s.stamp) for m, s in sorted(world.store.states.items()))
    )
    return res


def shrink(seed: int, faults: list[Fault], **switches: bool) -> list[Fault]:
    """Remove faults one at a time while the seed still fails."""
    current = list(faults)
    changed = True
    while changed:
        changed = False
        for i in range(len(current)):
            trial = current[:i] + current[i + 1 :]
            if run_seed(seed, trial, **switches).violations:
                current, changed = trial, True
                break
    return current
