"""Fault injection for crash tests: SIGKILL the worker at named points.

``ONLINEPREDICT_FAULTS="after_learn=0.0005,after_state_write=0.2"`` kills the process
with that probability each time the point is passed; ``ONLINEPREDICT_FAULT_SEED`` seeds
the draw. Points: ``after_learn`` (state changed in memory, not yet checkpointed),
``before_checkpoint``, ``after_state_write`` (Redis written, Kafka offsets not committed),
``after_commit``. Unset (the default) costs one dict lookup per point.
``ONLINEPREDICT_FAULT_ACTION=stall:SECONDS`` blocks the process for that long instead of
killing it (a batch that holds the event loop: the stop-bound tests use it).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time

logger = logging.getLogger(__name__)

POINTS = ("after_learn", "before_checkpoint", "after_state_write", "after_commit")


class Faults:
    def __init__(self, spec: str = "", seed: int | None = None, action: str = "kill") -> None:
        self.stall_s = float(action.partition(":")[2]) if action.startswith("stall:") else 0.0
        self.rates: dict[str, float] = {}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            name, _, rate = part.partition("=")
            if name not in POINTS:
                raise ValueError(f"unknown fault point {name!r}; known: {', '.join(POINTS)}")
            self.rates[name] = float(rate or 1.0)
        self.rng = random.Random(seed)

    @classmethod
    def from_env(cls) -> Faults:
        seed = os.environ.get("ONLINEPREDICT_FAULT_SEED")
        return cls(
            os.environ.get("ONLINEPREDICT_FAULTS", ""),
            int(seed) if seed else None,
            os.environ.get("ONLINEPREDICT_FAULT_ACTION", "kill"),
        )

    def hit(self, point: str, times: int = 1) -> None:
        """Pass ``point`` ``times`` times (e.g. once per event of a learned batch)."""
        rate = self.rates.get(point)
        if rate and any(self.rng.random() < rate for _ in range(times)):
            if self.stall_s:
                logger.warning("fault injection: stall of %.0f s at %s", self.stall_s, point)
                time.sleep(self.stall_s)
                return
            logger.warning("fault injection: SIGKILL at %s", point)
            os.kill(os.getpid(), signal.SIGKILL)
