"""A draining stop: learn to the end of the log, then stop as usual.

Asked for by ``onlinepredict worker --drain`` (``onlinepredict up`` starts its workers so,
and stops its API first, so the log's end no longer moves). The embedded broker keeps its
log in memory: what a worker has not learned when it stops is lost with the broker.

The end of a partition is the high watermark of a fetch answer, never ListOffsets (tansu
answers that with the last batch's base offset + 1). An answer counts only when its fetch
was sent after the drain began: the client keeps one fetch in flight per broker, so the
second answer stamped after the start is one (the first may have waited in a socket while
a batch was learned, and carry an end from before the API's last produce).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from service.worker.assignment import Assignment
from service.worker.ports import FetchedAt, Log, TopicPartition

logger = logging.getLogger(__name__)


class Drain:
    """Whether every partition this worker owns has been learned to its end."""

    def __init__(
        self,
        log: Log,
        assignment: Assignment,
        topic: str,
        *,
        fetched_at: FetchedAt | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.log = log
        self.assignment = assignment
        self.topic = topic
        self.fetched_at = fetched_at  # None: the log answers synchronously (in memory)
        self.since = clock()
        self._first: dict[TopicPartition, float] = {}  # first answer stamped after `since`

    def _fresh(self, tp: TopicPartition) -> bool:
        if self.fetched_at is None:
            return True
        at = self.fetched_at(tp)
        if at is None or at < self.since:
            return False
        return at > self._first.setdefault(tp, at)

    def behind(self) -> dict[int, int | None]:
        """Partitions not yet learned to their end: records left (None: end not known yet)."""
        out: dict[int, int | None] = {}
        for tp in sorted(self.log.assignment()):
            if tp.topic != self.topic:
                continue
            position = self.assignment.next_offset.get(tp)
            end = self.log.highwater(tp)
            if not self._fresh(tp) or end is None or position is None:
                out[tp.partition] = None
            elif position < end:
                out[tp.partition] = end - position
        return out
