"""``Assignment``: where the worker stands in each partition it owns.

It owns the next offset the worker expects per partition, the generation counter and the
one seek rule. The client may hand a record out twice around a seek, and a record below
the next offset is such a repeat. The generation is bumped on every assignment, revocation
and seek: a batch fetched under an older generation is stale (docs/checkpoints.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from service.worker.ports import Batch, Log, TopicPartition


class Assignment:
    def __init__(self, log: Log) -> None:
        self.log = log
        self.next_offset: dict[TopicPartition, int] = {}
        # the group's committed offset when the partition was assigned, then past each
        # record forwarded: every record of a model of another partition below it was
        # forwarded home before (forward.py)
        self.forward_floor: dict[TopicPartition, int] = {}
        self.generation = 0

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """The one seek rule: move the log, expect ``offset`` next, make fetched batches
        stale (``process_batch`` also drops the rest of the batch in hand for ``tp``)."""
        self.log.seek(tp, offset)
        self.next_offset[tp] = offset
        self.generation += 1

    def changed(self) -> None:
        """Partitions were assigned or revoked: fetched batches are stale."""
        self.generation += 1

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:  # forward_floor stays: what this process forwarded, it did
            self.next_offset.pop(tp, None)

    def refetch(self, batch: Batch) -> None:
        """Drop a stale batch without losing records: each of its partitions still
        assigned goes back to the next offset expected (the batch may hold records fetched
        before a seek, from the committed offset, or after it)."""
        assigned = self.log.assignment()
        for tp in batch:
            if tp in assigned and tp in self.next_offset:
                self.seek(tp, self.next_offset[tp])

    def lags(self, topic: str) -> list[tuple[int, int]]:
        """``(partition, highwater - next offset)`` of ``topic``'s partitions that have
        had a fetch answered (for ``onlinepredict_consumer_lag``)."""
        try:
            assigned = self.log.assignment()
        except Exception:  # noqa: BLE001 - not subscribed yet / stopping: no lag to show
            assigned = set()
        out = []
        for tp in sorted(assigned):
            if tp.topic != topic:
                continue
            highwater = self.log.highwater(tp)
            position = self.next_offset.get(tp)
            if highwater is None or position is None:
                continue  # no fetch answered yet for this partition
            out.append((tp.partition, max(0, highwater - position)))
        return out
