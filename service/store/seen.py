"""The seen-id window's stored layout: one blob per model (docs/design.md, "Checkpoints").

An event id is kept as its 64-bit digest, :func:`~service.store.checkpoints.id_hash`
(blake2b, 8 bytes): the hash ``ids_sum`` already sums, so an id is hashed once. A new id
is mistaken for one of the W ids in the window with probability at most W / 2**64
(5.4e-16 at the default W = 10,000): one wrongly dropped event in ~1,000 years of one
model learning 60,000 events/s without pause (docs/reliability.md, "Duplicates").

Layout, version 1 (little-endian)::

    header   8 bytes: b"OPSW", version (u8 = 1), record size (u8 = 16), 2 zero bytes
    records  16 bytes each, oldest first: applied count (u64), id digest (u64)

The records are in applied-count order, so "the ids applied up to count N" is a prefix.
A writer appends the new records and, once the blob holds more than ``keep + keep // 4``
of them, keeps the newest ``keep`` (the trim is amortised over a quarter window); a
reader takes the newest ``keep``. The old layout, a sorted set of ids scored by the
applied count, is read too (:func:`from_ids`), and replaced by the blob at the next write.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from learners import _accel

MAGIC = b"OPSW"
VERSION = 1
HEADER = MAGIC + bytes([VERSION, 16, 0, 0])
RECORD = np.dtype([("applied", "<u8"), ("digest", "<u8")])
assert RECORD.itemsize == 16 and len(HEADER) == 8


# copied per id: a copy costs less than a new hasher (whose keyword argument is parsed each
# time); the same digest as ``blake2b(data, digest_size=8)``
_BLAKE2B_8 = hashlib.blake2b(digest_size=8)


def id_digest(event_id: str) -> bytes:
    """An event id's 8-byte blake2b digest: ``id_hash``'s bytes, a record's ``digest``."""
    h = _BLAKE2B_8.copy()
    h.update(event_id.encode())
    return h.digest()


def digests(event_ids: Iterable[str]) -> np.ndarray:
    """The ids' 64-bit digests (``id_hash`` of each), as a uint64 array: hashlib's, computed
    for a batch by the compiled BLAKE2b (:mod:`service.store._blake2b`) when numba is there."""
    ids = event_ids if type(event_ids) is list else list(event_ids)
    k = _compiled()
    if k is None or len(ids) < _COMPILED_FROM:
        return hashlib_digests(ids)
    text = "".join(ids)
    if text.isascii():  # one byte per character: encode once
        blob = text.encode("ascii")
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
    else:
        parts = [i.encode() for i in ids]  # raises as id_digest does on a lone surrogate
        blob = b"".join(parts)
        lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.empty(len(ids), np.uint64)
    k(np.frombuffer(blob, np.uint8), offsets, out)
    return out


def id_hash(event_id: str) -> int:
    """64-bit hash of an event id; summed mod 2**64 into ``ids_sum``: blake2b, 8 bytes."""
    return int.from_bytes(id_digest(event_id), "little")


def digest_ints(event_ids: list[str]) -> list[int]:
    """:func:`digests` as Python ints (``id_hash`` of each), hashed one by one where the
    compiled call would not pay."""
    if len(event_ids) < _COMPILED_FROM or _compiled() is None:
        return [id_hash(i) for i in event_ids]
    return digests(event_ids).tolist()  # type: ignore[no-any-return]


def warm() -> None:
    """Compile the BLAKE2b kernel or load it from numba's cache (the Docker image's build,
    with the learners' ``warm``), so a worker's first batch does not compile it."""
    digests(["warm"] * _COMPILED_FROM)


def hashlib_digests(event_ids: Iterable[str]) -> np.ndarray:
    """:func:`digests` by hashlib, one call per id."""
    # map, no Python frame of our own per id: the hash is most of the per-event cost
    raw = b"".join(map(id_digest, event_ids))
    return np.frombuffer(raw, dtype="<u8").astype(np.uint64)


#: below this many ids hashlib is cheaper than the compiled call's set-up
_COMPILED_FROM = 8
#: [the compiled digest_blob], imported on first use
_kernel: list[Any] = []


def _compiled() -> Any:
    """The compiled BLAKE2b while the learners' compiled path is on (``_accel.enabled``:
    numba installed, not switched off), else None."""
    if sys.byteorder != "little" or not _accel.enabled():
        return None
    if not _kernel:
        from service.store._blake2b import digest_blob

        _kernel.append(digest_blob)
    return _kernel[0]


@dataclass(eq=False)
class SeenRecords:
    """A model's stored window: applied counts and id digests, oldest first. ``legacy``:
    read from the old layout (the next write must store the whole window)."""

    applied: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    digests: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    legacy: bool = False

    def __len__(self) -> int:
        return len(self.digests)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SeenRecords)
            and self.legacy == other.legacy
            and np.array_equal(self.applied, other.applied)
            and np.array_equal(self.digests, other.digests)
        )

    def newest(self, keep: int) -> SeenRecords:
        start = len(self) - min(len(self), max(keep, 0))
        return SeenRecords(self.applied[start:], self.digests[start:], self.legacy)

    def upto(self, applied: int) -> SeenRecords:
        """The records applied at or before count ``applied`` (a prefix)."""
        n = int(np.searchsorted(self.applied, applied, side="right"))
        return SeenRecords(self.applied[:n], self.digests[:n], self.legacy)


def of_ids(pairs: Sequence[tuple[int, str]]) -> SeenRecords:
    """Records of ``(applied count, event id)`` pairs, oldest first."""
    applied = np.array([a for a, _ in pairs], dtype=np.int64)
    return SeenRecords(applied, digests([i for _, i in pairs]))


def new_records(pairs: Sequence[tuple[int, str]]) -> bytes:
    """The records a writer appends for ``(applied count, event id)`` pairs."""
    recs = of_ids(pairs)
    return records(recs.applied, recs.digests)


def records(applied: np.ndarray, digests_: np.ndarray) -> bytes:
    """Records (no header) for parallel arrays of applied counts and digests."""
    out = np.empty(len(digests_), RECORD)
    out["applied"] = applied
    out["digest"] = digests_
    return out.tobytes()


def encode(window: SeenRecords) -> bytes:
    """The whole blob: header + records."""
    return HEADER + records(window.applied, window.digests)


def decode(blob: bytes) -> SeenRecords:
    """Parse a blob; ``ValueError`` naming the versions for an unknown layout."""
    if blob[:4] != MAGIC or len(blob) < len(HEADER):
        raise ValueError("seen-ids blob: not a seen window (bad magic)")
    if blob[4] != VERSION or blob[5] != RECORD.itemsize:
        raise ValueError(f"seen-ids blob: layout version {blob[4]}, this code reads {VERSION}")
    body = memoryview(blob)[len(HEADER) :]
    if len(body) % RECORD.itemsize:
        raise ValueError("seen-ids blob: truncated record")
    recs = np.frombuffer(body, RECORD)
    return SeenRecords(recs["applied"].astype(np.int64), recs["digest"].astype(np.uint64))


def from_ids(scored: Sequence[tuple[str, float]]) -> SeenRecords:
    """The old layout (ids with their applied-count scores, oldest first), migrated."""
    ids = [i for i, _ in scored]
    applied = np.array([int(s) for _, s in scored], dtype=np.int64)
    return SeenRecords(applied, digests(ids), legacy=True)


def trim_at(keep: int) -> int:
    """A writer trims the blob to the newest ``keep`` records once it holds more than this."""
    return keep + keep // 4


def append(blob: bytes | None, new: bytes, keep: int) -> bytes | None:
    """What the checkpoint script does with an append (``new``: records): the reference
    the in-memory store uses; ``None`` when there is nothing to store."""
    if keep <= 0 or not new:
        return blob
    out = (blob or HEADER) + new
    n = (len(out) - len(HEADER)) // RECORD.itemsize
    if n > trim_at(keep):
        out = HEADER + out[len(out) - keep * RECORD.itemsize :]
    return out
