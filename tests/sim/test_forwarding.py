"""Forwarded events in the simulation with small dedupe windows (issue 32): the stream
sends records off their home partition only with a window wider than the run (a forward
repeated after a crash is a re-send), so these seeds switch that off to keep what the
small windows found."""

from __future__ import annotations

import pytest

from tests.sim import stream
from tests.sim.faults import parse
from tests.sim.run import run_seed


def test_a_partition_read_again_from_its_start_forwards_nothing_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 300 (a 10-id window): the worker that took over a partition with no model of
    its own read it from its start and committed a lower offset than the one committed
    before, so the next owner forwarded 17 events again, learned twice; the committed
    offset never goes below the forward floor now (docs/reliability.md, "Partitions")."""
    monkeypatch.setattr(stream, "FORWARD_ANY_WINDOW", True)
    res = run_seed(300, parse("leave@172(0,0,0); join@183(0,0,0)"))
    assert not res.violations, res.violations
