"""Shared pieces of the performance benchmarks (learners, predict, service).

Import this module first: it pins BLAS to one thread before numpy loads. On this 2-core
machine a multithreaded OpenBLAS spins on small (d <= 500) matrices and, under load, makes
the matrix learners up to 10x slower; a worker runs one learner per event anyway.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _report  # noqa: E402
from benchmarks._report import markdown_table as markdown_table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def machine() -> str:
    """One line describing where the numbers come from (load matters on a shared box)."""
    load = os.getloadavg()
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()},"
        f" load average {load[0]:.1f} at start, BLAS threads"
        f" {os.environ.get('OPENBLAS_NUM_THREADS')}"
    )


def timed_rate(
    step: Callable[[int], object],
    n_rows: int,
    budget_s: float,
    *,
    warmup: int = 3,
    cycle: bool = True,
    clock: Callable[[], float] = time.process_time,
) -> tuple[int, float]:
    """Call ``step(i)`` over rows ``i`` (cycling through ``n_rows``, or stopping at the
    last row when ``cycle`` is false) until ``budget_s`` of ``clock`` time is spent; returns
    (events timed, seconds). The first ``warmup`` calls are not timed (first-call
    allocation and imports)."""
    i = 0
    for _ in range(warmup):
        t0 = clock()
        step(i % n_rows)
        i += 1
        first = clock() - t0
        if first > budget_s:  # one event is over budget: report it (first-call cost included)
            return 1, first
    events = 0
    start = clock()
    elapsed = 0.0
    chunk = 1
    while elapsed < budget_s:
        if not cycle:
            chunk = min(chunk, n_rows - i)
            if chunk <= 0:
                break
        for _ in range(chunk):
            step(i % n_rows)
            i += 1
        events += chunk
        elapsed = clock() - start
        chunk = min(chunk * 2, 256)
    return events, elapsed


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_processes(procs: Iterable[subprocess.Popen], timeout: float) -> None:
    """Stop the processes a benchmark started: SIGTERM to all, then wait up to ``timeout``
    seconds for each, killing (and reaping) any that is still running."""
    procs = list(procs)
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def fmt_rate(rate: float | None) -> str:
    if rate is None:
        return "–"
    if rate >= 100:
        return f"{rate:,.0f}"
    return f"{rate:.3g}"


def fmt_ratio(a: float | None, b: float | None) -> str:
    if not a or not b:
        return "–"
    r = a / b
    if r < 0.1:
        return f"{r:.2g}x"
    return f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def extract_tree(rev: str, dest: Path | str) -> None:
    """``service``, ``learners`` and ``clients`` of git revision ``rev`` into ``dest``: the
    code a before/after comparison runs beside the working tree."""
    archive = subprocess.run(
        ["git", "archive", rev, "service", "learners", "clients"],
        cwd=ROOT,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)


def write(path: Path, text: str) -> None:
    _report.write_text(path, text)
    print(f"wrote {path.relative_to(ROOT)}")


# ---- the stack the service benchmarks run against -------------------------------------------
LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def redis_url() -> tuple[str, object | None]:
    """The machine's Redis when one answers on 127.0.0.1:6379, else an embedded
    ``redis-server`` (returned second, for the caller to stop)."""
    from service.embedded import redis_answers, start_redis

    if redis_answers("127.0.0.1", 6379):
        return LOCAL_REDIS, None
    server = start_redis()
    return server.url, server


def delete_prefix(redis: str, prefix: str) -> int:
    """Delete every key under ``prefix`` (a benchmark's own); returns how many."""
    import redis as redis_lib

    client = redis_lib.Redis.from_url(redis)
    n = 0
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=5000))
        for i in range(0, len(keys), 1000):
            n += client.delete(*keys[i : i + 1000])
    finally:
        client.close()
    return n


async def produce(
    settings: Any, records: list[tuple[bytes, bytes]], *, ensure: bool = False
) -> float:
    """Produce ``(key, value)`` records to ``settings.events_topic`` (creating the topics
    first with ``ensure``); the seconds it took, flush included."""
    from aiokafka import AIOKafkaProducer

    if ensure:
        from service.embedded.topics import ensure_topics

        await ensure_topics(settings)
    producer = AIOKafkaProducer(linger_ms=20, max_batch_size=256 * 1024, **settings.kafka_options())
    await producer.start()
    t0 = time.perf_counter()
    try:
        for key, value in records:
            await producer.send(settings.events_topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()
    return time.perf_counter() - t0


def linear_rows(n: int, dim: int, seed: int) -> tuple[list[list[float]], list[float]]:
    """n rows of a seeded linear regression stream, y = x.w + noise, x ~ N(0, I/dim),
    rounded to 6 decimals (the benchmarks' events)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w = rng.normal(size=dim)
    X = np.round(rng.normal(size=(n, dim)) / np.sqrt(dim), 6)
    y = np.round(X @ w + 0.1 * rng.normal(size=n), 6)
    return X.tolist(), y.tolist()


def spawn_api(root: Path, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``onlinepredict api`` of the tree ``root`` with the environment ``env``, its output
    in ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "service.cli", "api"],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )


def wait_api(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60) -> None:
    """Until the API on ``port`` answers ``/healthz``; its log's tail if it exits first."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"API on {port} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"API on {port} did not come up")
