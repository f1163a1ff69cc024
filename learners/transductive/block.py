"""The registered block of a transductive learner (docs/algorithms/transductive.md).

A mixin for learners whose prior is built from a block of design vectors registered before
their labels: validation of the block, canonical (sorted) storage so that the state depends
on the multiset only (§13.11), and the registry "vector -> remaining multiplicity" kept as
the flat arrays ``block_`` (T, d) and ``remaining_`` (T,) plus a derived lookup index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from learners.base import StateSize, Unanswerable


def row_key(x: np.ndarray) -> bytes:
    """Canonical float64 bytes of a vector (-0.0 == 0.0), the registry key of spec §14."""
    return (np.ascontiguousarray(x, dtype=np.float64) + 0.0).tobytes()


class BlockMixin:
    """Block bookkeeping shared by the transductive learners (state: ``block_``,
    ``remaining_``; derived: ``_index``)."""

    kind: ClassVar[str]
    dim: int
    preprocess_refused: ClassVar[dict[str, str]] = dict.fromkeys(
        ("standardize", "clip", "intercept"),
        "x must be one of the registered block's vectors, which a moving transform would change",
    )
    preprocess_default: ClassVar[dict[str, Any] | None] = None
    #: the largest block ``register`` accepts (the block is part of the state).
    max_block: ClassVar[int] = 100_000
    #: ... and at most this many numbers (T * dim): the block is checkpointed with the state.
    max_block_cells: ClassVar[int] = 10_000_000
    block_: np.ndarray
    remaining_: np.ndarray
    _index: dict[bytes, list[int]]

    @classmethod
    def state_size(
        cls, dim: int, params: Mapping[str, Any] | None = None, *, block: int | None = None
    ) -> StateSize:
        """``Learner.state_size`` with a registered block of ``block`` vectors; None (the
        figure at creation) is the largest block ``register`` accepts."""
        spec = cls._checked_spec(dim, params)  # type: ignore[attr-defined]
        return cls._state_size(*spec, block)  # type: ignore[attr-defined,no-any-return]

    @classmethod
    def largest_block(cls, dim: int) -> int:
        """The most vectors ``register`` accepts at ``dim`` (``max_block``, ``max_block_cells``)."""
        return min(cls.max_block, cls.max_block_cells // dim)

    def _check_block(self, vectors: Any) -> np.ndarray:
        """The block as a sorted float64 array; ``ValueError`` on a bad block."""
        try:
            X = np.asarray(vectors, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            msg = f"{self.kind}: vectors must be a T x {self.dim} array: {exc}"
            raise ValueError(msg) from None
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise ValueError(
                f"{self.kind}: vectors must have shape (T, {self.dim}), got {tuple(X.shape)}"
            )
        if not 1 <= X.shape[0] <= self.max_block:
            raise ValueError(
                f"{self.kind}: a block needs 1 to {self.max_block} vectors, got {X.shape[0]}"
            )
        if X.size > self.max_block_cells:
            raise ValueError(
                f"{self.kind}: a block may hold at most {self.max_block_cells} numbers"
                f" (T * dim), got {X.shape[0]} x {X.shape[1]}"
            )
        if not np.all(np.isfinite(X)):
            raise ValueError(f"{self.kind}: vectors must be finite (no NaN or inf)")
        # sort the rows: the state depends on the multiset only (spec §13.11, test 5)
        return X[np.lexsort(X.T[::-1])] + 0.0

    def _build_index(self) -> None:
        index: dict[bytes, list[int]] = {}
        for i, row in enumerate(self.block_):
            index.setdefault(row_key(row), []).append(i)
        self._index = index

    def _after_restore(self) -> None:
        self._build_index()

    def _find(self, x: np.ndarray) -> int:
        """Index of an unused block row equal to ``x``, or -1."""
        for i in self._index.get(row_key(x), ()):
            if self.remaining_[i]:
                return i
        return -1

    @property
    def block_remaining(self) -> int:
        return int(self.remaining_.sum())

    def _unregistered_error(self, hint: str = "") -> Unanswerable:
        if self.block_.shape[0] == 0:
            why = "no block is registered; call register(vectors) first"
        else:
            why = "x is not in the registered block (or its multiplicity is used up)"
        return Unanswerable(f"{self.kind}: {why}{hint}")
