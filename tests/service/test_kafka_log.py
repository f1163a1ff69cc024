"""The aiokafka adapter's probe reads against the real broker (the worker's log checks,
service/worker/checkpointer.py, read every partition's witness in one ``read_many``)."""

from __future__ import annotations

from typing import Any

from service.worker.adapters.kafka_log import KafkaLog
from service.worker.ports import Probe, TopicPartition
from tests.service._ops_support import produce_at
from tests.service.conftest import make_event, run


async def _probe(settings: Any, points: dict[TopicPartition, int]) -> tuple[Any, Any]:
    log = KafkaLog.from_settings(settings, "probe-test")
    await log.start()
    try:
        many = await log.read_many(points)
        one = {tp: await log.read_at(tp, offset) for tp, offset in points.items()}
    finally:
        await log.stop_probe()
        await log.stop_producer()
    return many, one


def _seen(found: Any) -> Any:
    return found if isinstance(found, Probe) else (found.offset, found.value)


def test_read_many_answers_what_read_at_answers(make_settings) -> None:  # type: ignore[no-untyped-def]
    st = make_settings()
    parts = range(min(3, st.partitions))
    for p in parts:
        events = [make_event("m", f"p{p}-{i}", [1.0], 1.0) for i in range(5 + p)]
        run(produce_at(st, events, partition=p))
    tp = [TopicPartition(st.events_topic, p) for p in parts]
    points = {t: 2 + t.partition for t in tp}
    points[tp[-1]] = 50  # past the end
    many, one = run(_probe(st, points))
    assert {t: _seen(v) for t, v in many.items()} == {t: _seen(v) for t, v in one.items()}
    assert many[tp[-1]] is Probe.PAST_END
    for t in tp[:-1]:
        rec = many[t]
        assert not isinstance(rec, Probe) and rec.offset == points[t]
        assert f'"p{t.partition}-{points[t]}"'.encode() in (rec.value or b"")
