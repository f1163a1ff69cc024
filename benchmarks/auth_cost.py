"""What the API's checks cost per request (issue 31): predict and ingest throughput with
API keys and rate limits off, keys on, and keys plus rate limits on, in one run.

Three ``onlinepredict api`` processes (``service.cli api``: the served protocol with the
header timeout, the middleware with the body read, the concurrency limit and the limiter),
each on its own port, over the same Redis and broker and the same model:

* ``off``: no key configured, ``ONLINEPREDICT_RATE_LIMITS=off``;
* ``keys``: ``ONLINEPREDICT_API_KEYS`` with four keys (every secret is hashed and compared
  on each request, docs/security.md), rate limits off;
* ``keys+limits``: the same keys and the default rate limits (one Redis call per request
  for the shared count; the limits are far above what this load reaches, so every request
  is served: a 429 would make the ratio meaningless).

Load: ``_bench_load.py`` (a raw keep-alive client, closed loop) in its own process, rounds
alternating off / keys / keys+limits so a change of background load hits all three.
Workloads: one predict (JSON ``x``, d = 20), a batch of 100 (binary body), and a batch of
100 events (JSON, produced to the broker). Each row gives requests/s, p50/p99, the API's
CPU per request and Redis's (the limiter's share of Redis work), and the ratio to ``off``.

    python benchmarks/auth_cost.py [--seconds 4] [--rounds 2] [--conns 16]

Writes benchmarks/results/auth_cost.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import _bench  # before numpy: pins BLAS threads
import httpx
import numpy as np
import redis as redis_lib
from _bench import RESULTS, ROOT, fmt_ratio, markdown_table, process_cpu_s, stop_processes, write

from clients.wire import PREDICT_CONTENT_TYPE, encode_predict_batch

HERE = Path(__file__).resolve().parent
DIM = 20
BATCH = 100
MODEL = "auth-bench"
ADMIN = "bench-admin-secret"
CLIENT = "bench-client-secret"
KEYS = (
    f"ops:admin:{ADMIN},app:predict+ingest+read:{CLIENT},"
    "other:read:another-secret-1,tenant:predict:tenant-secret-1:t-"
)
CONFIGS = {
    "off": {"ONLINEPREDICT_RATE_LIMITS": "off"},
    "keys": {"ONLINEPREDICT_API_KEYS": KEYS, "ONLINEPREDICT_RATE_LIMITS": "off"},
    "keys+limits": {"ONLINEPREDICT_API_KEYS": KEYS},  # the default limits
}
WORKLOADS = {
    "predict, single (JSON)": ("predict", ".json"),
    f"predict, batch of {BATCH} (binary)": ("predict", ".bin"),
    f"events, batch of {BATCH} (JSON)": ("events", ".json"),
}
CONTENT_TYPES = {".json": "application/json", ".bin": PREDICT_CONTENT_TYPE}


def start_api(settings: Any, port: int, extra: dict[str, str], log: Path) -> subprocess.Popen:
    env = settings.child_environment(
        ONLINEPREDICT_API_PORT=str(port),
        ONLINEPREDICT_LOG_LEVEL="WARNING",
        ONLINEPREDICT_METRICS_PORT="0",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return _bench.spawn_api(ROOT, env, log)


def load(port: int, path: str, body: Path, seconds: float, conns: int, key: str | None) -> dict:
    cmd = [sys.executable, str(HERE / "_bench_load.py"), "--port", str(port), "--path", path]
    cmd += ["--body-file", str(body), "--conns", str(conns), "--seconds", str(seconds)]
    cmd += ["--content-type", CONTENT_TYPES[body.suffix]]
    if key:
        cmd += ["--header", f"X-API-Key: {key}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=seconds + 60)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--slow", type=int, default=300, help="slow connections held open")
    args = ap.parse_args()
    from service.config import Settings
    from service.embedded import start_broker
    from service.embedded.topics import ensure_topics

    t0 = time.monotonic()
    info = _bench.machine()
    broker = start_broker()
    redis, server = _bench.redis_url()
    run = uuid.uuid4().hex[:8]
    settings = Settings(
        kafka_bootstrap=broker.url,
        redis_url=redis,
        key_prefix=f"opbench:{run}:auth:",
        events_topic=f"opbench.{run}.auth.events",
        deadletter_topic=f"opbench.{run}.auth.deadletter",
        consumer_group=f"opbench-{run}-auth",
    )
    asyncio.run(ensure_topics(settings))
    from service.embedded import free_port

    tmp = Path(tempfile.mkdtemp(prefix="auth_cost-"))
    procs: dict[str, subprocess.Popen] = {}
    ports: dict[str, int] = {}
    results: dict[tuple[str, str], list[dict]] = {}
    redis_client = redis_lib.Redis.from_url(redis)

    def redis_cpu() -> float:
        cpu = redis_client.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    try:
        for name, extra in CONFIGS.items():
            ports[name] = free_port()
            procs[name] = start_api(settings, ports[name], extra, tmp / f"{name}.log")
        for name in CONFIGS:
            _bench.wait_api(ports[name], procs[name], tmp / f"{name}.log")
        spec = {"id": MODEL, "kind": "pa", "dim": DIM}
        r = httpx.post(
            f"http://127.0.0.1:{ports['keys']}/v1/models", json=spec, headers={"X-API-Key": ADMIN}
        )
        assert r.status_code == 201, r.text
        rng = np.random.default_rng(0)
        X = np.round(rng.normal(size=(BATCH, DIM)), 6)
        bodies = {
            ("predict", ".json"): json.dumps({"x": X[0].tolist()}).encode(),
            ("predict", ".bin"): encode_predict_batch(X, None),
            ("events", ".json"): json.dumps(
                {"events": [{"x": row, "y": float(row[0])} for row in X.tolist()]}
            ).encode(),
        }
        files = {}
        for (route, suffix), body in bodies.items():
            files[(route, suffix)] = tmp / f"{route}{suffix}"
            files[(route, suffix)].write_bytes(body)
        for _ in range(args.rounds):
            for workload, (route, suffix) in WORKLOADS.items():
                for name in CONFIGS:
                    key = CLIENT if name != "off" else None
                    pid = procs[name].pid
                    cpu0, rcpu0 = process_cpu_s(pid), redis_cpu()
                    res = load(
                        ports[name],
                        f"/v1/models/{MODEL}/{route}",
                        files[(route, suffix)],
                        args.seconds,
                        args.conns,
                        key,
                    )
                    total = res["total_requests"] or 1
                    res["cpu_ms"] = 1e3 * (process_cpu_s(pid) - cpu0) / total
                    res["redis_cpu_ms"] = 1e3 * (redis_cpu() - rcpu0) / total
                    results.setdefault((workload, name), []).append(res)
                    print(
                        f"{workload:32s} {name:12s} {res['rate']:8.0f}/s p99"
                        f" {res['p99_ms'] or 0:6.2f} ms cpu {res['cpu_ms']:.3f} ms"
                        f" errors {res['errors']} {res['statuses']}",
                        flush=True,
                    )
        slow = slow_clients(ports["keys+limits"], args.slow)
    finally:
        stop_processes(procs.values(), 10)
        redis_client.close()
        removed = _bench.delete_prefix(redis, settings.key_prefix)
        broker.stop()
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
    report(results, slow, info, time.monotonic() - t0, args, removed)


def _latencies(http: httpx.Client, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"GET /healthz": [], "keyed predict": []}
    body = {"x": [0.5] * DIM}
    for _ in range(n):
        t = time.perf_counter()
        assert http.get("/healthz").status_code == 200
        out["GET /healthz"].append(1e3 * (time.perf_counter() - t))
        t = time.perf_counter()
        r = http.post(f"/v1/models/{MODEL}/predict", json=body, headers={"X-API-Key": CLIENT})
        assert r.status_code == 200, r.text[:200]
        out["keyed predict"].append(1e3 * (time.perf_counter() - t))
    return out


def slow_clients(port: int, n_slow: int, samples: int = 30) -> dict[str, Any]:
    """Latency of /healthz and a keyed predict (a new connection each) alone, then with
    ``n_slow`` slow connections open (half stopped in their headers, half in their body)."""
    import socket

    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        http.headers["Connection"] = "close"  # a new connection each: the accept path too
        alone = _latencies(http, samples)
        socks = []
        try:
            for i in range(n_slow):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                if i % 2 == 0:
                    s.sendall(b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                else:
                    s.sendall(
                        b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Length: 1000\r\n\r\n" + b"{"
                    )
                socks.append(s)
            held = _latencies(http, samples)
        finally:
            for s in socks:
                s.close()
    return {"n": n_slow, "samples": samples, "alone": alone, "held": held}


def _best(runs: list[dict]) -> dict:
    """The round with the highest rate (the least disturbed by the shared machine)."""
    return max(runs, key=lambda r: r["rate"])


def report(
    results: dict, slow: dict[str, Any], info: str, elapsed: float, args: Any, removed: int
) -> None:
    rows = []
    for workload in WORKLOADS:
        base = _best(results[(workload, "off")])
        for name in CONFIGS:
            best = _best(results[(workload, name)])
            errors = sum(r["errors"] for r in results[(workload, name)])
            rows.append(
                [
                    workload,
                    name,
                    f"{best['rate']:,.0f}",
                    fmt_ratio(best["rate"], base["rate"]),
                    f"{best['p50_ms']:.2f}",
                    f"{best['p99_ms']:.2f}",
                    f"{best['cpu_ms']:.3f}",
                    f"{best['cpu_ms'] - base['cpu_ms']:+.3f}",
                    f"{best['redis_cpu_ms'] * 1e3:.0f}",
                    str(errors),
                ]
            )
    table = markdown_table(
        [
            "workload",
            "checks",
            "requests/s",
            "vs off",
            "p50 ms",
            "p99 ms",
            "API CPU ms/req",
            "vs off",
            "Redis CPU us/req",
            "non-2xx",
        ],
        rows,
    )
    slow_rows = []
    for what in ("GET /healthz", "keyed predict"):
        for label, key in (("none", "alone"), (str(slow["n"]), "held")):
            ms = sorted(slow[key][what])
            p50 = ms[len(ms) // 2]
            slow_rows.append([what, label, f"{p50:.1f}", f"{ms[-1]:.1f}"])
    slow_table = markdown_table(
        ["request (new connection)", "slow connections open", "p50 ms", "max ms"], slow_rows
    )
    cmd = "python benchmarks/auth_cost.py"
    cmd += f" --seconds {args.seconds:g} --rounds {args.rounds} --conns {args.conns}"
    text = f"""# Auth and rate limiting: cost per request

`{cmd} --slow {slow["n"]}` ({elapsed:.0f} s; {info}).

Three `onlinepredict api` processes on one Redis and one embedded broker: `off` (no key,
`ONLINEPREDICT_RATE_LIMITS=off`), `keys` (four keys in `ONLINEPREDICT_API_KEYS`, limits
off) and `keys+limits` (the same keys, the default rate limits: one Redis call per
request, limits far above this load). Closed loop, {args.conns} keep-alive connections;
the best of {args.rounds} alternating rounds per cell. CPU is per request, the API
process's (from /proc) and Redis's (`INFO cpu`, shared with the other APIs' idle work).
Model: `pa`, d = {DIM}, no checkpoint (version 0). {removed} keys removed afterwards.

{table}

## Slow clients

The `keys+limits` API with {slow["n"]} slow connections open (half stopped in their
headers, half after one byte of a 1,000-byte body; the header and body timeouts, 10 s and
30 s by default, are longer than the measurement): {slow["samples"]} `GET /healthz` and
{slow["samples"]} keyed predicts, each on a new connection, before and while they are held.

{slow_table}
"""
    print(text)
    write(RESULTS / "auth_cost.md", text)


if __name__ == "__main__":
    main()
