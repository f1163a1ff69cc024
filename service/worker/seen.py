"""``SeenWindow``: a model's dedupe window, the last ``keep`` applied ids as 64-bit digests.

The digests, their applied counts and when they were applied sit in numpy ring buffers;
a dict from digest to its entry's sequence number finds an id in O(1) (a lookup is a
C-level ``map`` over the batch; entries older than the window are simply stale there and
the dict is rebuilt from the ring once it holds twice the window). Digests:
``service/store/seen.py``, which also holds the stored layout.

:meth:`SeenWindow.duplicates` decides a whole batch at once with the outcome of the
event-by-event loop (an id is a duplicate when it is in the window at its turn, the
evictions by the ids learned before it in the batch included).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

import numpy as np

from service.store import seen as layout
from service.store.seen import SeenRecords

FEW = 64  # up to this many ids, one after the other costs less than setting up arrays
_TAIL = 1024  # entries staged in a list before they are moved into the arrays


class SeenWindow:
    def __init__(self, keep: int) -> None:
        self.keep = keep
        cap = max(keep, 1)
        self._digest = np.zeros(cap, np.uint64)
        self._applied = np.zeros(cap, np.int64)
        self._time = np.zeros(cap, np.float64)
        self._next = 0  # sequence number of the next id added
        self._size = 0
        self._index: dict[int, int] = {}  # digest -> sequence number of its newest entry
        self._written = 0  # the store holds the entries numbered below this
        self._writing = 0
        self.evicted = 0  # ids that left the window since it was made
        self.reset = False  # the store must get the whole window at the next write
        # the newest entries, added a few at a time, not yet in the ring buffers: their
        # digests, applied counts, and (how many, when) per addition
        self._tail_keys: list[int] = []
        self._tail_applied: list[int] = []
        self._tail_times: list[tuple[int, float]] = []

    @classmethod
    def load(cls, keep: int, stored: SeenRecords, now: float) -> SeenWindow:
        """The window of a stored model (ids loaded count as applied ``now``, so the stated
        horizon is never overstated); a window read from the old layout is stored whole
        at the next write."""
        w = cls(keep)
        recs = stored.newest(keep)
        w.add(recs.digests, recs.applied, now)
        w._written = w._writing = w._next
        w.evicted = 0
        w.reset = stored.legacy
        return w

    def __len__(self) -> int:
        return self._size

    @property
    def _oldest(self) -> int:
        return self._next - self._size

    def __contains__(self, digest: int) -> bool:
        return self._index.get(digest, -1) >= self._oldest

    def _seqs(self, digests: np.ndarray) -> np.ndarray:
        """Each digest's sequence number in the window, -1 when it is not there."""
        n = len(digests)
        seq = np.fromiter(map(self._index.get, digests.tolist(), repeat(-1, n)), np.int64, n)
        seq[seq < self._oldest] = -1
        return seq

    def duplicates(self, digests: np.ndarray) -> np.ndarray:
        """Which of these ids (in handling order, each learned unless a duplicate) are
        duplicates: in the window at their turn, or learned earlier in the batch. Changes
        nothing; at most ``keep`` ids (more would turn the window over)."""
        n = len(digests)
        dup = np.zeros(n, dtype=bool)
        if self.keep == 0 or n == 0:
            return dup
        assert n <= self.keep
        if n <= FEW:
            return np.array(self.duplicates_in_order(digests.tolist()), dtype=bool)
        seq = self._seqs(digests)
        hit = seq >= 0
        keys = digests.tolist()
        distinct = len(set(keys)) == n
        if distinct and not hit.any():
            return dup
        repeat_ = np.zeros(n, dtype=bool)  # an earlier id of the batch has the same digest
        if not distinct:
            repeat_[:] = True
            repeat_[np.unique(digests, return_index=True)[1]] = False
        if self._size + n <= self.keep:  # nothing is evicted during the batch
            return hit | repeat_
        # Evictions depend on how many were learned before: decide the few ids that hit
        # the window or repeat in order; every other id is learned.
        learned: set[int] = set()
        oldest, base, ndup = self._oldest, self._size - self.keep, 0
        for i in np.flatnonzero(hit | repeat_).tolist():
            if repeat_[i] and (not hit[i] or keys[i] in learned):
                dup[i] = True  # its first copy in the batch was learned
            elif hit[i] and seq[i] - oldest >= base + i - ndup:  # not evicted by its turn
                dup[i] = True
            else:
                learned.add(keys[i])
                continue
            ndup += 1
        return dup

    def duplicates_in_order(self, keys: list[int]) -> list[bool]:
        """``duplicates`` one id after the other, for a few ids (digests as ints)."""
        out = []
        learned: set[int] = set()
        get, oldest, base = self._index.get, self._oldest, self._size - self.keep
        for key in keys:
            seq = get(key, -1)
            if key in learned or (seq >= oldest and seq - oldest >= base + len(learned)):
                out.append(True)
            else:
                out.append(False)
                learned.add(key)
        return out

    def add(
        self,
        digests: np.ndarray | list[int],
        applied: np.ndarray | Sequence[int],
        now: float,
    ) -> None:
        """Append applied ids (oldest first), evicting the oldest beyond ``keep``."""
        k, keep = len(digests), self.keep
        if keep == 0 or k == 0:
            return
        self.evicted += max(0, self._size + k - keep)
        if k <= FEW:  # staged in a list: cheaper than array set-up for a few ids
            keys = digests.tolist() if isinstance(digests, np.ndarray) else digests
            # lengths are equal by construction: strict=False spares a check per id
            self._index.update(zip(keys, range(self._next, self._next + k), strict=False))
            self._tail_keys.extend(keys)
            self._tail_applied.extend(applied)
            self._tail_times.append((k, now))
            self._next += k
            if len(self._tail_keys) >= _TAIL:
                self._flush()
        else:
            self._flush()
            d, a = np.asarray(digests, np.uint64), np.asarray(applied, np.int64)
            if k > keep:
                self._next += k - keep
                d, a, k = d[-keep:], a[-keep:], keep
            slots = np.arange(self._next, self._next + k) % keep
            self._digest[slots] = d
            self._applied[slots] = a
            self._time[slots] = now
            self._index.update(zip(d.tolist(), range(self._next, self._next + k), strict=True))
            self._next += k
        self._size = min(self._size + k, keep)
        if len(self._index) > 2 * keep + 64:  # drop the stale entries
            self._flush()
            seqs = range(self._oldest, self._next)
            self._index = dict(zip(self._digest[self._slots(seqs)].tolist(), seqs, strict=True))

    def _flush(self) -> None:
        """Move the staged entries into the ring buffers."""
        n, keep = len(self._tail_keys), self.keep
        if not n:
            return
        counts, times = zip(*self._tail_times, strict=True)
        start = max(0, n - keep)  # older ones are out of the window already
        slots = np.arange(self._next - (n - start), self._next) % keep
        self._digest[slots] = np.array(self._tail_keys[start:], dtype=np.uint64)
        self._applied[slots] = self._tail_applied[start:]
        self._time[slots] = np.repeat(times, counts)[start:]
        self._tail_keys.clear()
        self._tail_applied.clear()
        self._tail_times.clear()

    def add_one(self, digest: int, applied: int, now: float) -> None:
        self.add([digest], (applied,), now)

    def _slots(self, seqs: range) -> np.ndarray:
        return np.arange(seqs.start, seqs.stop) % max(self.keep, 1)

    def records(self, since: int | None = None) -> SeenRecords:
        """The window's entries, oldest first (``since``: numbered from there on)."""
        self._flush()
        first = self._oldest if since is None else max(since, self._oldest)
        slots = self._slots(range(first, self._next))
        return SeenRecords(self._applied[slots].copy(), self._digest[slots].copy())

    def oldest_time(self) -> float | None:
        """When the oldest id in the window was applied (None: empty)."""
        self._flush()
        return float(self._time[self._oldest % self.keep]) if self._size else None

    def for_write(self) -> tuple[bytes, bool]:
        """What the next checkpoint stores: ``(records to append, False)``, or the whole
        blob and True (after a migration from the old layout, or a rollback)."""
        self._writing = self._next
        if self.reset:
            return layout.encode(self.records()), True
        new = self.pending()
        return layout.records(new.applied, new.digests), False

    def pending(self) -> SeenRecords:
        """The entries added since the last write that are still in the window."""
        return self.records(self._written)

    def written(self) -> None:
        """The store holds what the last ``for_write`` returned."""
        self._written = self._writing
        self.reset = False
