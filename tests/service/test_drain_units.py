"""``service.worker.drain.Drain``: when a worker may call its partitions learned to their end
(the draining stop of docs/reliability.md, "Stopping the embedded stack")."""

from __future__ import annotations

from dataclasses import dataclass, field

from service.worker.drain import Drain
from service.worker.ports import TopicPartition

TOPIC = "events"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)


@dataclass
class FakeLog:
    ends: dict[TopicPartition, int | None]
    other: set[TopicPartition] = field(default_factory=set)  # another topic's partitions

    def assignment(self) -> set[TopicPartition]:
        return set(self.ends) | self.other

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.ends.get(tp)


@dataclass
class FakeAssignment:
    next_offset: dict[TopicPartition, int]


def _drain(log: FakeLog, at: dict[TopicPartition, int], answers: dict[TopicPartition, float]):  # type: ignore[no-untyped-def]
    return Drain(
        log,  # type: ignore[arg-type]
        FakeAssignment(at),  # type: ignore[arg-type]
        TOPIC,
        fetched_at=answers.get,
        clock=lambda: 100.0,  # the drain begins at t=100
    )


def test_only_the_second_fetch_answer_after_the_start_counts() -> None:
    log = FakeLog({P0: 10})
    answers = {P0: 99.0}  # answered before the drain began: its end may be stale
    drain = _drain(log, {P0: 10}, answers)
    assert drain.behind() == {0: None}
    answers[P0] = 100.5  # may have waited in a socket: its fetch may predate the start
    assert drain.behind() == {0: None}
    answers[P0] = 100.7  # its fetch was sent after the first answer, so after the start
    assert drain.behind() == {}


def test_records_left_are_counted_per_partition_and_other_topics_ignored() -> None:
    log = FakeLog({P0: 10, P1: 7}, other={TopicPartition("deadletter", 0)})
    answers = {P0: 101.0, P1: 101.0}
    drain = _drain(log, {P0: 4, P1: 7}, answers)
    drain.behind()
    answers.update({P0: 102.0, P1: 102.0})
    assert drain.behind() == {0: 6}
    drain.assignment.next_offset[P0] = 10  # type: ignore[attr-defined]
    assert drain.behind() == {}


def test_an_end_or_position_not_known_yet_is_not_drained() -> None:
    answers = {P0: 101.0, P1: 101.0}
    drain = _drain(FakeLog({P0: None, P1: 3}), {P0: 0}, answers)
    drain.behind()
    answers.update({P0: 102.0, P1: 102.0})
    assert drain.behind() == {0: None, 1: None}


def test_without_fetch_times_the_log_is_taken_as_answering_at_once() -> None:
    drain = Drain(FakeLog({P0: 5}), FakeAssignment({P0: 5}), TOPIC)  # type: ignore[arg-type]
    assert drain.behind() == {}
