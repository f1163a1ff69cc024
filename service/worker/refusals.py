"""What a checkpoint makes visible of the events a model refused (docs/design.md, "Dead
letters"): its newest dead letters, a bounded list per model in Redis that the API's
``GET /v1/models/{id}/deadletters`` reads, and the share of its recent events it refused
(its status' ``refusing``; the API's ``onlinepredict_model_refused_share``).

The list is written with the checkpoint that covers the letters, in the same pipeline
(after the dead-letter topic has them). A replay after a crash or a lost write decides the
same records again and may list a letter twice: the API shows each (partition, offset, row)
once. The recent share counts the last ``RECENT`` or more events the worker decided for the
model since it loaded it (a new owner starts afresh): it is a health signal, not a ledger.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from service.store.deadletters import LIST_KEEP, RECENT, letter_entry, refusing

__all__ = ["LIST_KEEP", "RecentShares", "Refusals", "letter_entry", "refusing"]


@dataclass
class Refusals:
    """One checkpoint's additions: per model, its new letters (JSON, oldest first) and its
    recent (events, refused) when either is worth writing."""

    letters: dict[str, list[bytes]] = field(default_factory=dict)
    shares: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.letters or self.shares)


class RecentShares:
    """Per model, the (events, refused) counts of the last checkpoints, covering at least
    ``RECENT`` events: the deltas of its cumulative counters (applied + rejected)."""

    def __init__(self) -> None:
        self.last: dict[str, tuple[int, int]] = {}  # model -> (applied, rejected) seen
        self.window: dict[str, deque[tuple[int, int]]] = {}
        self.written: dict[str, int] = {}  # model -> refused last written (0: none)

    def update(
        self, counters: Iterable[tuple[str, tuple[int, int], tuple[int, int]]]
    ) -> dict[str, tuple[int, int]]:
        """Take each model's cumulative (applied, rejected) and those it was loaded with;
        return (events, refused) of the models whose share is worth writing: one with a
        refusal in its window, or whose last written share had one (so it reads 0 again)."""
        out: dict[str, tuple[int, int]] = {}
        for model, (applied, rejected), loaded in counters:
            before = self.last.get(model, loaded)
            self.last[model] = (applied, rejected)
            da, dr = applied - before[0], rejected - before[1]
            if da < 0 or dr < 0:  # reloaded or rolled back: start again
                self.window.pop(model, None)
                continue
            if not da and not dr:
                continue
            w = self.window.setdefault(model, deque())
            w.append((da + dr, dr))
            total = sum(e for e, _ in w)
            while len(w) > 1 and total - w[0][0] >= RECENT:
                total -= w.popleft()[0]
            refused = sum(r for _, r in w)
            if refused or self.written.get(model):
                out[model] = (total, refused)
                self.written[model] = refused
        return out

    def forget(self, models: Iterable[str]) -> None:
        for m in models:
            self.last.pop(m, None)
            self.window.pop(m, None)
            self.written.pop(m, None)
