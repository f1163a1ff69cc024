"""Helpers for the worker tests: worker subprocesses, producing, reading the log back,
and the reference in-process replay.

Fixtures: ``worker_settings`` (function scope: fresh topics/group/prefix via
``make_settings`` with a fast commit cadence), ``redis_client`` (sync ``redis.Redis``) and
``client`` (module scope: a ``TestClient`` of the app built from the module's ``api_settings``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib

from tests._frames import record_events
from tests._wait import wait_for  # noqa: F401 (the one poll helper, imported from here too)

ROOT = Path(__file__).resolve().parents[2]
# a stopping worker's own bound (worker_stop_timeout_s) plus this covers the interpreter's
# start-up and exit; the deploy files leave at least this much too (tests/deploy)
STOP_SLACK_S = 5.0

FAST = {
    "commit_every": 200,
    "commit_interval_s": 0.3,
    "consumer_session_timeout_ms": 6000,
    "max_poll_records": 200,
}


@pytest.fixture
def worker_settings(make_settings):  # type: ignore[no-untyped-def]
    return make_settings(**FAST)


@pytest.fixture(scope="module")
def client(api_settings):  # type: ignore[no-untyped-def]
    """An in-process API (``TestClient``) for the module, built from the module's own
    ``api_settings`` fixture."""
    from fastapi.testclient import TestClient

    from service.api import create_app

    with TestClient(create_app(api_settings)) as c:
        yield c


@pytest.fixture
def redis_client(redis_url: str):  # type: ignore[no-untyped-def]
    client = redis_lib.Redis.from_url(redis_url)
    yield client
    client.close()


def settings_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment that makes ``python -m service.worker`` use ``settings``."""
    return settings.child_environment(**extra, PYTHONPATH=str(ROOT))  # type: ignore[no-any-return]


@dataclass
class WorkerProcess:
    """One ``python -m service.worker`` subprocess, restartable, logging to a file."""

    settings: Any
    name: str
    log_dir: Path
    incarnation: int = 0
    entry: tuple[str, ...] = ("-m", "service.worker")  # or the CLI: ("-m", "service.cli", "worker")
    proc: subprocess.Popen[bytes] | None = None
    logs: list[Path] = field(default_factory=list)

    def start(self, **env: str) -> None:
        log = self.log_dir / f"{self.name}-{self.incarnation}.log"
        self.logs.append(log)
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *self.entry],
                cwd=ROOT,
                env=settings_env(
                    self.settings,
                    ONLINEPREDICT_WORKER_ID=f"{self.name}-{self.incarnation}",
                    **env,
                ),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.incarnation += 1

    @contextlib.contextmanager
    def running(self, **env: str) -> Iterator[WorkerProcess]:
        """Started here and killed on the way out, whatever the test raised (a no-op after
        a clean ``stop``)."""
        self.start(**env)
        try:
            yield self
        finally:
            self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def catches_sigterm(self) -> bool:
        """The process has its SIGTERM handler (service.worker.early_stop) in place."""
        assert self.proc is not None
        try:
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
        except OSError:  # gone, or no procfs: nothing to wait for
            return True
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)

    def stop(self) -> int | None:
        """SIGTERM (graceful) and wait the worker's own stop bound plus ``STOP_SLACK_S``;
        SIGKILL if it hangs (then the exit code is -9). A worker restarted a moment ago
        is first given the time to install its handler: before it, the interpreter
        itself is still starting, and SIGTERM's default action ends it (exit -15)."""
        if self.proc is None:
            return None
        limit = time.monotonic() + STOP_SLACK_S
        while self.proc.poll() is None and not self.catches_sigterm():
            assert time.monotonic() < limit, "worker never installed its SIGTERM handler"
            time.sleep(0.01)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(self.settings.worker_stop_timeout_s + STOP_SLACK_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())


def make_event(model: str, event_id: str, x: list[float], y: Any, **extra: Any) -> dict[str, Any]:
    return {"model": model, "id": event_id, "x": x, "y": y, **extra}


async def produce(settings: Any, events: Iterable[dict[str, Any]], *, raw: bool = False) -> int:
    """Produce events keyed by model (``raw``: items are ``(key, value)`` byte pairs)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(linger_ms=5, **settings.kafka_options())
    await producer.start()
    n = 0
    try:
        for ev in events:
            if raw:
                key, value = ev  # type: ignore[misc]
            else:
                key, value = ev["model"].encode(), json.dumps(ev).encode()
            await producer.send(settings.events_topic, value, key=key)
            n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n


def as_frames(events: list[dict[str, Any]], rows: int = 50) -> list[tuple[bytes, bytes]]:
    """``events`` as frames (docs/events.md §6), ``raw`` records for ``produce``: each
    model's events in their order, up to ``rows`` per frame."""
    from clients.wire import encode_frame

    by_model: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_model.setdefault(e["model"], []).append(e)
    out = []
    for model, evs in by_model.items():
        for i in range(0, len(evs), rows):
            part = evs[i : i + rows]
            value = encode_frame(
                model,
                [e["id"] for e in part],
                [e["x"] for e in part],
                [e["y"] for e in part],
                [e.get("hint") for e in part],
            )
            out.append((model.encode(), value))
    return out


async def read_topic(settings: Any, topic: str) -> list[tuple[int, int, bytes | None, bytes]]:
    """Every record of ``topic`` as (partition, offset, key, value), per partition in order."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    consumer = AIOKafkaConsumer(enable_auto_commit=False, **settings.kafka_options())
    await consumer.start()
    out = []
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()  # noqa: SLF001
            parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        # tansu's ListOffsets(latest) is wrong (last batch base + 1): use fetch highwaters
        for tp in tps:
            empty = 0
            while empty < 3:
                batch = await consumer.getmany(tp, timeout_ms=300)
                recs = batch.get(tp, [])
                out += [(r.partition, r.offset, r.key, r.value) for r in recs]
                hw = consumer.highwater(tp)
                if not recs:
                    empty += 1
                if hw is not None and await consumer.position(tp) >= hw:
                    break
    finally:
        await consumer.stop()
    return out


@dataclass
class Replayed:
    learner: Any
    applied_ids: list[str] = field(default_factory=list)
    duplicates: int = 0
    rejected: int = 0


def replay(specs: dict[str, dict[str, Any]], log: list[tuple[int, int, Any, bytes]]) -> dict:
    """The reference: one uninterrupted in-process pass over the log, per model in log order,
    each event id learned once (written independently of the worker code)."""
    import learners

    out: dict[str, Replayed] = {
        m: Replayed(learners.build(s["kind"], s["dim"], s.get("preprocess"), **s.get("params", {})))
        for m, s in specs.items()
    }
    seen: dict[str, set[str]] = {m: set() for m in specs}
    # a model created through the API lives on its origin's partition, after its origin
    origins = {m: s["origin"] for m, s in specs.items() if isinstance(s.get("origin"), dict)}
    for partition, offset, ev in (
        (p, o, ev) for p, o, _, value in log for ev in record_events(value)
    ):
        r = out.get(ev["model"])
        if r is None or ev.get("type") == "created":
            continue
        if ev.get("incarnation") not in (None, specs[ev["model"]].get("incarnation")):
            continue  # produced for a deleted incarnation: not this model's
        o = origins.get(ev["model"])
        if o is not None and (partition != o["partition"] or offset <= o["offset"]):
            continue
        if ev["id"] in seen[ev["model"]]:
            r.duplicates += 1
            continue
        try:
            if ev.get("type") == "register":
                r.learner.register(ev["vectors"])
            elif ev.get("type") is not None:
                raise ValueError("unknown event type")
            else:
                r.learner.learn(ev["x"], ev["y"], hint=ev.get("hint"))
        except (ValueError, AttributeError):
            r.rejected += 1
            continue
        seen[ev["model"]].add(ev["id"])
        r.applied_ids.append(ev["id"])
    return out


def crash_stream(
    specs: dict[str, dict[str, Any]], n_events: int, n_resent: int, seed: int
) -> list[dict[str, Any]]:
    """The crash tests' stream: ``n_events`` examples over ``specs`` (pa regressions) plus
    ``n_resent`` exact copies of earlier events inserted later (duplicate ids)."""
    import random

    rng = random.Random(seed)
    models = sorted(specs)
    out: list[dict[str, Any]] = []
    for i in range(n_events):
        m = models[rng.randrange(len(models))]
        x = [rng.gauss(0, 1) for _ in range(specs[m]["dim"])]
        y = sum((k + 1) * v for k, v in enumerate(x)) + rng.gauss(0, 0.1)
        out.append(make_event(m, f"ev-{seed}-{i}", x, y))
    for _ in range(n_resent):
        src = rng.randrange(len(out) - 1)
        out.insert(rng.randrange(src + 1, len(out) + 1), dict(out[src]))
    return out


def handled(r: Any, keys: Any, specs: Iterable[str]) -> dict[str, int]:
    """Events each model has handled (applied + duplicate) as its checkpoint says."""
    out = {}
    for m in specs:
        h = r.hmget(keys.state(m), "applied", "duplicate")
        out[m] = sum(int(v) for v in h if v is not None)
    return out


def expected_handled(events: list[dict[str, Any]], specs: Iterable[str]) -> dict[str, int]:
    out = dict.fromkeys(specs, 0)
    for e in events:
        out[e["model"]] += 1
    return out


def assert_matches_replay(
    r: Any, keys: Any, specs: dict[str, dict[str, Any]], log: list[tuple[int, int, Any, bytes]]
) -> dict[str, dict[bytes, bytes]]:
    """The crash tests' oracle: every model's checkpoint equals one uninterrupted replay of
    ``log``: state bytes, ``applied``, ``ids_sum`` (each id once) and ``duplicate``. Returns
    the checkpoint hashes and checks the replay saw every re-sent id as a duplicate."""
    from learners.codec import encode_state
    from service.store.checkpoints import ids_sum

    ref = replay(specs, log)
    finals = {}
    for m, expect in ref.items():
        h = r.hgetall(keys.state(m))
        assert h[b"state"] == encode_state(expect.learner.state()), f"{m}: state differs"
        assert int(h[b"applied"]) == len(expect.applied_ids), m
        assert int(h[b"ids_sum"]) == ids_sum(expect.applied_ids), m  # each id exactly once
        assert int(h[b"duplicate"]) == expect.duplicates, m
        finals[m] = h
    return finals


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def port_open(port: int) -> bool:
    """Something listens on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.3):
            return True
    except OSError:
        return False


async def run_worker_until(
    settings: Any, done: Callable[[], Any], timeout: float = 60.0, worker_id: str = "t"
) -> Any:
    """Run an in-process worker until ``await done()`` is true, then stop it gracefully;
    its result (the worker context). A worker that fails raises here."""
    from service.worker.loop import run_worker

    stop = asyncio.Event()
    task = asyncio.create_task(run_worker(settings, stop=stop, worker_id=worker_id))
    try:
        async with asyncio.timeout(timeout):
            while not await done():
                if task.done():
                    task.result()
                await asyncio.sleep(0.1)
    finally:
        stop.set()
    return await task
