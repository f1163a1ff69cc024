"""The short simulation run in ``make test`` (``make sim SEEDS=N`` runs more)."""

from __future__ import annotations

from tests.sim.faults import parse
from tests.sim.run import run_seed

SEEDS = 2000


def test_seeds_hold_the_exactly_once_oracle() -> None:
    failed = []
    for seed in range(SEEDS):
        res = run_seed(seed)
        if res.violations:
            failed.append(f"seed {seed}: {res.violations[0]} (make sim SEED={seed})")
    assert not failed, "\n".join(failed[:5])


def test_a_seed_replays_identically() -> None:
    a, b = run_seed(7), run_seed(7)
    assert (a.digest, a.trace, a.events) == (b.digest, b.trace, b.events)


def test_the_oracle_catches_a_lost_store_suffix_no_event_repairs() -> None:
    """Without events after the faults, a model whose last writes the store lost keeps its
    older state (reported in docs/reliability.md): the oracle must see it."""
    res = run_seed(124, parse("redis_loss@111(2,0,0)"), strict_drain=True)
    assert res.violations and "applied" in res.violations[0]
    assert not run_seed(124, parse("redis_loss@111(2,0,0)")).violations
