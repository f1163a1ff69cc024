"""The short simulation run in ``make test`` (``make sim SEEDS=N`` runs more)."""

from __future__ import annotations

import pytest

from service.worker.audit import Audit
from tests.sim.__main__ import violating_seeds
from tests.sim.faults import parse
from tests.sim.run import run_seed

SEEDS = 1500  # a prefix of the 2,000 run before: CI sat at its 20-minute limit
FRAME_SEEDS = 400
# one test per slice of seeds (a seed depends on nothing but its number), each its own
# xdist group: make test's pytest-xdist spreads the slices over its processes
CHUNK = 100


def _slices(seeds: int, name: str) -> list[object]:
    return [
        pytest.param(s, marks=pytest.mark.xdist_group(f"{name}-{s}"), id=str(s))
        for s in range(0, seeds, CHUNK)
    ]


@pytest.mark.parametrize("start", _slices(SEEDS, "sim"))
def test_seeds_hold_the_exactly_once_oracle(start: int) -> None:
    found = violating_seeds((start, min(start + CHUNK, SEEDS), False, False))
    failed = [f"seed {seed}: {v[0]} (make sim SEED={seed})" for seed, v in found]
    assert not failed, "\n".join(failed[:5])


@pytest.mark.parametrize("start", _slices(FRAME_SEEDS, "sim-frames"))
def test_frame_seeds_hold_the_exactly_once_oracle(start: int) -> None:
    """The same protocol with a third of the examples in binary frames (docs/events.md §6):
    re-sent frames, ids twice in a frame, a bad row, a frame the learner refuses."""
    found = violating_seeds((start, min(start + CHUNK, FRAME_SEEDS), False, False, True))
    failed = [f"seed {seed}: {v[0]} (make sim SEED={seed} SIM_FLAGS=--frames)" for seed, v in found]
    assert not failed, "\n".join(failed[:5])


def test_a_seed_replays_identically() -> None:
    a, b = run_seed(7), run_seed(7)
    assert (a.digest, a.trace, a.events) == (b.digest, b.trace, b.events)


def test_the_oracle_catches_a_lost_store_suffix_no_event_repairs(monkeypatch) -> None:
    """Without events after the faults, only the store-epoch check (service/worker/audit.py)
    repairs a model whose last writes the store lost: switched off, the model keeps its
    older state, and the oracle must see it."""
    faults = parse("redis_loss@111(2,0,0)")
    assert not run_seed(124, faults, strict_drain=True).violations

    async def unchecked(self: Audit) -> None:
        return None

    monkeypatch.setattr(Audit, "check_store", unchecked)
    res = run_seed(124, faults, strict_drain=True)
    assert res.violations and "applied" in res.violations[0]


def test_seeds_that_found_bugs_hold() -> None:
    """Regressions (docs/reliability.md, "Deterministic simulation"): a version number the
    store issued again after losing writes (seed 53811, fixed by the write token); a log
    cut under running workers (seeds 28, 217, 273 with ``--truncation``)."""
    aba = run_seed(53811, parse("join@17(0,0,0); pause@139(1,2,14); redis_loss@150(2,0,0)"))
    assert not aba.violations, aba.violations
    for seed in (28, 217, 273):
        res = run_seed(seed, truncation=True)
        assert not res.violations, (seed, res.violations)
