"""The embedded broker's two storage engines (issue 17): tansu ``memory://`` against tansu
``s3://`` on ``localbucket`` (``service.embedded.durable``), same machine, same run.

For each engine: produce N events of the service's shape (~120 bytes, 4 partitions, aiokafka
with acks=all and linger 5 ms, as the API does) and time it; consume them all from the
start (a group-less consumer, as fast as it can) and time it; read them again with the
worker's fetch wait (the broker holds an empty fetch for at most 20 ms:
``FETCH_MAX_WAIT_MS`` in ``service/worker/adapters/kafka_log.py``) and count what arrives
before 8 s pass with nothing new; commit a consumer group's offsets. Then SIGKILL the
broker, start it again on the same storage and count what is left: records per partition
and the group's committed offsets.

    python benchmarks/embedded_broker.py [--events 50000] [--repeat 3]

Prints the table (and writes benchmarks/results/embedded_broker.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402
from aiokafka.structs import OffsetAndMetadata  # noqa: E402

from service.embedded import start_broker  # noqa: E402
from service.embedded.durable import BUCKET, s3_env, start_localbucket  # noqa: E402
from service.embedded.stack import EmbeddedProcess, free_port  # noqa: E402

TOPIC = "bench.events"
PARTITIONS = 4
GROUP = "bench-group"
WORKER_FETCH_WAIT_MS = 20  # service/worker/adapters/kafka_log.py: FETCH_MAX_WAIT_MS
IDLE_S = 8.0  # a read that gets nothing new for this long has stalled


def _event(i: int) -> bytes:
    ev = {"model": f"m{i % 8}", "id": f"e{i:08d}", "x": [0.25, -1.5, 3.0, i % 7], "y": 0.5}
    return json.dumps(ev).encode()


async def _produce(bootstrap: str, n: int) -> float:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if TOPIC not in await admin.list_topics():
            await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=5
    )
    await producer.start()
    try:
        started = time.perf_counter()
        futures = [
            await producer.send(TOPIC, _event(i), key=f"m{i % 8}".encode()) for i in range(n)
        ]
        await asyncio.gather(*futures)
        return time.perf_counter() - started
    finally:
        await producer.stop()


async def _consume(bootstrap: str, n: int, fetch_wait_ms: int = 500) -> tuple[float, int]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=fetch_wait_ms,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        started = time.perf_counter()
        idle_since = time.perf_counter()
        while got < n and time.perf_counter() - idle_since < IDLE_S:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            if batch:
                got += sum(len(v) for v in batch.values())
                idle_since = time.perf_counter()
        return time.perf_counter() - started, got
    finally:
        await consumer.stop()


async def _commit(bootstrap: str, offsets: dict[int, int]) -> None:
    consumer = AIOKafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False
    )
    await consumer.start()
    try:
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
        await consumer.commit(
            {TopicPartition(TOPIC, p): OffsetAndMetadata(o, "") for p, o in offsets.items()}
        )
    finally:
        await consumer.stop()


async def _committed(bootstrap: str) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(TOPIC, p)) for p in range(PARTITIONS)}
    finally:
        await consumer.stop()


class Engine:
    """One engine's broker (and store), restartable on the same storage."""

    def __init__(self, name: str, data: Path) -> None:
        self.name, self.data = name, data
        self.port = free_port()
        self.store: EmbeddedProcess | None = None
        self.broker: EmbeddedProcess | None = None

    def start(self) -> None:
        if self.name == "memory":
            self.broker = start_broker(port=self.port)
            return
        if self.store is None:
            self.store = start_localbucket(self.data)
        self.broker = start_broker(
            port=self.port, storage=f"s3://{BUCKET}/", env=s3_env(self.store.url)
        )

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        for proc in (self.broker, self.store):
            if proc is not None:
                proc.stop()


def run_engine(name: str, n: int, repeat: int) -> dict[str, Any]:
    produce, consume = [], []
    survived = committed = at_worker_wait = None
    for r in range(repeat):
        with tempfile.TemporaryDirectory(prefix="op-bench-s3-") as tmp:
            engine = Engine(name, Path(tmp))
            engine.start()
            try:
                produce.append(n / asyncio.run(_produce(engine.bootstrap, n)))
                seconds, got = asyncio.run(_consume(engine.bootstrap, n))
                assert got == n, f"{name}: consumed {got} of {n}"
                consume.append(n / seconds)
                if r == 0:  # the worker's fetch wait and the crash check, once
                    _, at_worker_wait = asyncio.run(
                        _consume(engine.bootstrap, n, WORKER_FETCH_WAIT_MS)
                    )
                    want = {p: 100 + p for p in range(PARTITIONS)}
                    asyncio.run(_commit(engine.bootstrap, want))
                    assert engine.broker is not None
                    engine.broker.kill()  # SIGKILL: a crash
                    engine.start()
                    _, survived = asyncio.run(_consume(engine.bootstrap, n))
                    got_offsets = asyncio.run(_committed(engine.bootstrap))
                    committed = sum(got_offsets[p] == o for p, o in want.items())
            finally:
                engine.stop()
    return {
        "engine": name,
        "produce": produce,
        "consume": consume,
        "survived": survived,
        "at_worker_wait": at_worker_wait,
        "committed": committed,
    }


def _fmt(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = [run_engine(name, args.events, args.repeat) for name in ("memory", "s3")]
    lines = [
        f"{args.events:,} events of ~120 bytes, {PARTITIONS} partitions, {args.repeat} runs "
        "(median, min-max)",
        "",
        "| engine | produce rec/s | consume rec/s | read with a 20 ms fetch wait |"
        " records after SIGKILL + restart | committed offsets after it |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['engine']} | {_fmt(row['produce'])} | {_fmt(row['consume'])} | "
            f"{row['at_worker_wait']:,} of {args.events:,} | "
            f"{row['survived']:,} of {args.events:,} | {row['committed']} of {PARTITIONS} |"
        )
    text = "\n".join(lines)
    print(text)
    out = ROOT / "benchmarks" / "results" / "embedded_broker.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
