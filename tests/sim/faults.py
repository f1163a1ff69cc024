"""The fault schedule of a seed: a list of :class:`Fault`, each at a step of the run.

Drawn up front from its own ``random.Random``, so a schedule can be shrunk (faults removed
one at a time) and replayed with the same stream and the same interleaving otherwise.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS = (
    "crash",  # slot, k: the worker dies at its k-th next port call (before it, or after: arg2)
    "pause",  # slot, k, steps: a zombie - it stops at its k-th next port call, is dropped
    #           from the group, resumes after ``steps`` and tries to finish what it was doing
    "join",  # a worker joins the group
    "leave",  # slot: a worker stops gracefully (final checkpoint) and leaves
    "redis_loss",  # k: the store goes back to its k-th last snapshot (all keys together)
    "store_down",  # steps: every store call waits
    "broker_down",  # steps: polls come back empty, produce and offsets wait, commits fail
    "truncate",  # partition, k: the log loses its last k records (behind --truncation)
)


@dataclass(frozen=True)
class Fault:
    step: int
    kind: str
    a: int = 0
    b: int = 0
    c: int = 0

    def __str__(self) -> str:
        return f"{self.kind}@{self.step}({self.a},{self.b},{self.c})"


def make_schedule(
    seed: int, steps: int, slots: int, partitions: int, truncation: bool
) -> list[Fault]:
    rng = random.Random(f"faults:{seed}")
    kinds = [k for k in KINDS if truncation or k != "truncate"]
    out = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice(kinds)
        step = rng.randrange(steps)
        if kind == "crash":
            f = Fault(step, kind, rng.randrange(slots), rng.randint(1, 12), rng.randint(0, 1))
        elif kind == "pause":
            f = Fault(step, kind, rng.randrange(slots), rng.randint(1, 12), rng.randint(1, 15))
        elif kind == "leave":
            f = Fault(step, kind, rng.randrange(slots))
        elif kind == "redis_loss":
            f = Fault(step, kind, rng.randint(1, 6))
        elif kind in ("store_down", "broker_down"):
            f = Fault(step, kind, rng.randint(1, 10))
        elif kind == "truncate":
            f = Fault(step, kind, rng.randrange(partitions), rng.randint(1, 20))
        else:
            f = Fault(step, kind)
        out.append(f)
    return sorted(out, key=lambda f: (f.step, KINDS.index(f.kind), f.a, f.b, f.c))


def parse(text: str) -> list[Fault]:
    """The inverse of ``str`` on a comma-separated schedule (for a reproduction)."""
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        kind, _, rest = part.partition("@")
        step, _, args = rest.partition("(")
        a, b, c = (int(v) for v in args.rstrip(")").split(","))
        out.append(Fault(int(step), kind, a, b, c))
    return out
