"""What concurrent ``/metrics`` scrapers cost a predict client (issue 31: 4 scrapers pushed
a victim's predict p99 from 60 to 904 ms), before and after scrapes share one render.

1,000 ``pa`` models at d = 50 with real checkpoints (``scrape.seed``: the figures the
worker stores). Two ``onlinepredict api`` processes over them: the working tree, and the
``--baseline`` revision's code (``_bench.extract_tree``), where each scrape renders the
exposition itself. For each: a victim sending one-vector predicts at a fixed rate (open
loop, ``_bench_load.py``: latency from the scheduled send) alone, then with ``--scrapers``
clients each fetching ``/metrics`` in a loop (new connection each). Rate limits off, no
keys (loopback), no broker (predict and ``/metrics`` do not use it).

    python benchmarks/scrape_load.py [--baseline REV] [--seconds 8] [--scrapers 4]

Writes benchmarks/results/scrape_load.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import _bench  # before numpy: pins BLAS threads
import httpx
from _bench import RESULTS, ROOT, markdown_table, process_cpu_s, stop_processes, write
from scrape import seed

HERE = Path(__file__).resolve().parent
MODELS = 1000
DIM = 50
VICTIM_RATE = 50.0  # predicts per second
BASELINE = "13c450b"  # the code before scrapes shared a render


def start_api(root: Path, redis: str, prefix: str, port: int, log: Path) -> subprocess.Popen:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ONLINEPREDICT_") and k != "PYTHONPATH"
    }
    env.update(
        ONLINEPREDICT_REDIS_URL=redis,
        ONLINEPREDICT_KEY_PREFIX=prefix,
        ONLINEPREDICT_KAFKA_BOOTSTRAP="127.0.0.1:1",
        ONLINEPREDICT_API_PORT=str(port),
        ONLINEPREDICT_METRICS_PORT="0",
        ONLINEPREDICT_RATE_LIMITS="off",
        ONLINEPREDICT_SERIES_INTERVAL_S="0",
        ONLINEPREDICT_LOG_LEVEL="WARNING",
        PYTHONPATH=str(root),
    )
    return _bench.spawn_api(root, env, log)


def victim(port: int, body: Path, seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "_bench_load.py"), "--port", str(port)]
    cmd += ["--path", "/v1/models/m00000/predict", "--body-file", str(body)]
    cmd += ["--conns", "4", "--seconds", str(seconds), "--rate", str(VICTIM_RATE)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def run_case(port: int, pid: int, body: Path, seconds: float, scrapers: int) -> dict[str, Any]:
    stop = threading.Event()
    counts = [0] * scrapers
    sizes = [0] * scrapers

    def scrape(i: int) -> None:
        with httpx.Client(timeout=30, headers={"Connection": "close"}) as http:
            while not stop.is_set():
                r = http.get(f"http://127.0.0.1:{port}/metrics")
                counts[i] += 1
                sizes[i] = len(r.content)

    threads = [threading.Thread(target=scrape, args=(i,), daemon=True) for i in range(scrapers)]
    cpu0 = process_cpu_s(pid)
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        res = victim(port, body, seconds)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    elapsed = time.monotonic() - t0
    res["scrapes_per_s"] = sum(counts) / elapsed
    res["exposition_kib"] = max(sizes) / 1024 if scrapers else 0.0
    res["api_cpu_share"] = (process_cpu_s(pid) - cpu0) / elapsed
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--baseline", default=BASELINE)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--scrapers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    from redis.asyncio import Redis

    from service.embedded import free_port
    from service.store.keys import Keys

    t_start = time.monotonic()
    info = _bench.machine()
    redis, server = _bench.redis_url()
    prefix = f"opbench:{uuid.uuid4().hex[:8]}:scrape:"

    async def seed_all() -> None:
        client = Redis.from_url(redis)
        try:
            await seed(client, Keys(prefix), MODELS, DIM)
        finally:
            await client.aclose()

    asyncio.run(seed_all())
    tmp = Path(tempfile.mkdtemp(prefix="scrape_load-"))
    before = tmp / "before"
    before.mkdir()
    _bench.extract_tree(args.baseline, before)
    body = tmp / "x.json"
    body.write_text(json.dumps({"x": [0.1] * DIM}))
    trees = {f"before ({args.baseline})": before, "after (shared render)": ROOT}
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for name, root in trees.items():
            ports[name] = free_port()
            procs[name] = start_api(root, redis, prefix, ports[name], tmp / f"{len(procs)}.log")
        for i, name in enumerate(trees):
            _bench.wait_api(ports[name], procs[name], tmp / f"{i}.log")
            httpx.get(f"http://127.0.0.1:{ports[name]}/metrics", timeout=30)  # warm
        for _ in range(args.rounds):
            for scrapers in (0, args.scrapers):
                for name in trees:
                    res = run_case(ports[name], procs[name].pid, body, args.seconds, scrapers)
                    results.setdefault((name, scrapers), []).append(res)
                    print(
                        f"{name:28s} scrapers {scrapers}: p50 {res['p50_ms']:.1f} p99"
                        f" {res['p99_ms']:.1f} max {res['max_ms']:.1f} ms, scrapes"
                        f" {res['scrapes_per_s']:.1f}/s, API CPU {res['api_cpu_share']:.2f}",
                        flush=True,
                    )
    finally:
        stop_processes(procs.values(), 10)
        removed = _bench.delete_prefix(redis, prefix)
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
    rows = []
    for name in trees:
        for scrapers in (0, args.scrapers):
            runs = results[(name, scrapers)]
            rows.append(
                [
                    name,
                    str(scrapers),
                    ", ".join(f"{r['p50_ms']:.1f}" for r in runs),
                    ", ".join(f"{r['p99_ms']:.1f}" for r in runs),
                    ", ".join(f"{r['max_ms']:.0f}" for r in runs),
                    ", ".join(f"{r['scrapes_per_s']:.1f}" for r in runs),
                    ", ".join(f"{r['api_cpu_share']:.2f}" for r in runs),
                    str(sum(r["errors"] for r in runs)),
                ]
            )
    table = markdown_table(
        [
            "API code",
            "scrapers",
            "victim p50 ms",
            "victim p99 ms",
            "victim max ms",
            "scrapes/s",
            "API CPU (cores)",
            "victim non-2xx",
        ],
        rows,
    )
    kib = max(r["exposition_kib"] for runs in results.values() for r in runs)
    cmd = f"python benchmarks/scrape_load.py --baseline {args.baseline} --seconds"
    cmd += f" {args.seconds:g} --scrapers {args.scrapers} --rounds {args.rounds}"
    text = f"""# /metrics scrapers against a predict client

`{cmd}` ({time.monotonic() - t_start:.0f} s; {info}).

{MODELS} `pa` models at d = {DIM} with checkpoints ({kib:.0f} KiB of exposition). A victim
sends one-vector predicts at {VICTIM_RATE:g}/s (open loop, 4 connections, latency from the
scheduled send) for {args.seconds:g} s, alone and with {args.scrapers} clients fetching
`/metrics` in a loop; one value per round, rounds alternating the two API processes.
`before`: each scrape renders the exposition; `after`: scrapes that arrive during a render
share it (`service/api/prometheus.py`). {removed} keys removed afterwards.

{table}
"""
    print(text)
    write(RESULTS / "scrape_load.md", text)


if __name__ == "__main__":
    main()
