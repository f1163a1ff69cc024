"""Scaling across worker processes (issue 15): 1, 2 and 4 workers on 8 partitions and 200
models (d = 20), against a standalone Redis and a Redis Cluster; then one model on one
partition with one worker, per learner kind at d = 20 and 100 (where one model tops out).

Real broker and Redis: an embedded ``tansu`` broker, our own embedded ``redis-server``
(never the machine's shared one: this script turns its slow log on) and, for the cluster
rows, ``service.embedded.start_redis_cluster`` (3 masters + 3 replicas). The events are
produced before the workers start (JSON via ``clients.producer.make_event``); each row
gets its own consumer group and key prefix, so every row reads the same log from its start.

What is measured, per row:

* **events/s**: the learned events of the *stable window* over its wall time. The window
  opens at the first sample where every worker has learned an event (all joined the group:
  no more rebalances) and closes at the last learned event; earlier events are counted as
  "before the window" and not timed.
* **events per CPU-s per worker**: each worker's events over its own CPU seconds
  (``/proc/<pid>/stat``) in that window, both sampled at the same instant; the table shows
  the mean over workers (and the lowest). On this 2-core machine shared with other runs the
  wall rate of 4 workers cannot reach 2x one worker's; the CPU rate is the per-core figure
  a capacity plan scales.
* **checkpoint p99**: of the workers' own ``onlinepredict_checkpoint_seconds`` histograms
  (the whole commit as the worker waits for it), interpolated within the bucket as
  Prometheus' ``histogram_quantile`` does. Per shard: each Redis master's execution time
  of the checkpoint script (``EVALSHA``, one per model written), from its slow log with
  the threshold at 0 (Redis 6.2 has no latency histograms), drained every poll.

    python benchmarks/scale.py [--events 200000] [--workers 1,2,4] [--modes standalone,cluster]
                               [--kind-scale 1.0] [--no-per-kind]

Prints the tables; writes benchmarks/results/scale.md.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import _bench  # before numpy: pins BLAS threads
import numpy as np
from _bench import RESULTS, ROOT, linear_rows, markdown_table, process_cpu_s, produce, write

PARTITIONS = 8
N_MODELS = 200
DIM = 20
KINDS = ("pa", "arow", "dvaw", "rls", "nemsis")
KIND_DIMS = (20, 100)
# events per (kind, d): about 2 s of one core each at the rates this script measured
# (slower kinds get fewer), so the whole run stays under 5 minutes
KIND_EVENTS = {
    ("pa", 20): 60_000, ("pa", 100): 40_000, ("arow", 20): 40_000, ("arow", 100): 30_000,
    ("dvaw", 20): 30_000, ("dvaw", 100): 16_000, ("rls", 20): 30_000, ("rls", 100): 20_000,
    ("nemsis", 20): 50_000, ("nemsis", 100): 40_000,
}  # fmt: skip
POLL_S = 0.2
ROW_TIMEOUT_S = 90.0  # one row; keeps a stuck row from eating the 5-minute budget
SLOWLOG_LEN = 100_000  # entries a master keeps between two drains (one poll)
# the outcomes of a record handed to the learners (redelivered copies are dropped unseen)
HANDLED = ("applied", "duplicate", "rejected", "skipped")


# ---- Redis: standalone or cluster ---------------------------------------------------------
@dataclass
class RedisTarget:
    mode: str  # "standalone" | "cluster"
    url: str
    server: Any  # what to stop()
    masters: list[tuple[str, int]] = field(default_factory=list)


def start_target(mode: str) -> RedisTarget | str:
    """Our own Redis of that mode, or the reason it cannot run here."""
    from service.embedded import start_redis

    if mode == "standalone":
        server = start_redis()
        return RedisTarget(mode, server.url, server, [(server.host, server.port)])
    try:
        from service.embedded import start_redis_cluster  # type: ignore[attr-defined]
    except ImportError:
        return (
            "service.embedded.start_redis_cluster is not in this tree (the Redis Cluster"
            " support of issue 15): cluster rows skipped"
        )
    import redis as redis_lib
    from redis.cluster import RedisCluster

    server = start_redis_cluster(masters=3, replicas_per_master=1)
    rc = RedisCluster.from_url(server.url)
    try:
        masters = sorted((n.host, int(n.port)) for n in rc.get_primaries())
    finally:
        rc.close()
    for host, port in masters:  # the cluster must answer on every master before a row
        redis_lib.Redis(host=host, port=port).ping()
    return RedisTarget(mode, server.url, server, masters)


def async_client(target: RedisTarget) -> Any:
    if target.mode == "cluster":
        from redis.asyncio.cluster import RedisCluster

        return RedisCluster.from_url(target.url)
    from redis.asyncio import Redis

    return Redis.from_url(target.url)


class ShardLog:
    """Each master's checkpoint-script execution times (microseconds), from its slow log."""

    def __init__(self, target: RedisTarget) -> None:
        import redis as redis_lib

        self.clients = [redis_lib.Redis(host=h, port=p) for h, p in target.masters]
        self.names = [f"{h}:{p}" for h, p in target.masters]
        self.us: list[list[int]] = [[] for _ in self.clients]

    def start(self) -> None:
        self.last = [-1] * len(self.clients)  # id of the newest entry read, per master
        self.lost = 0  # entries the log dropped before a drain read them
        for c in self.clients:
            c.config_set("slowlog-log-slower-than", 0)
            c.config_set("slowlog-max-len", SLOWLOG_LEN)
            c.slowlog_reset()

    def drain(self) -> None:
        # read by entry id, never RESET between reads: a reset would drop what came in
        # between the read and the reset
        for i, (c, out) in enumerate(zip(self.clients, self.us, strict=True)):
            count = 2000
            while True:
                entries = c.slowlog_get(count)  # newest first
                fresh = [e for e in entries if int(e["id"]) > self.last[i]]
                if len(fresh) < len(entries) or count >= SLOWLOG_LEN:
                    break
                count *= 4
            if fresh:
                if self.last[i] >= 0:
                    self.lost += max(0, int(fresh[-1]["id"]) - self.last[i] - 1)
                self.last[i] = int(fresh[0]["id"])
            for e in fresh:
                cmd = e.get("command", b"")
                head = cmd.split(b" ", 1)[0] if isinstance(cmd, bytes) else str(cmd).split()[0]
                if head.upper() in (b"EVALSHA", b"EVAL", "EVALSHA", "EVAL"):
                    out.append(int(e["duration"]))

    def stop(self) -> None:
        for c in self.clients:
            c.config_set("slowlog-log-slower-than", 10_000)
            c.slowlog_reset()
            c.close()


def delete_prefix(target: RedisTarget, prefix: str) -> int:
    """Delete the row's keys on every master (one key per command: cluster slots differ)."""
    import redis as redis_lib

    n = 0
    for host, port in target.masters:
        c = redis_lib.Redis(host=host, port=port)
        try:
            keys = list(c.scan_iter(match=f"{prefix}*", count=5000))
            pipe = c.pipeline(transaction=False)
            for k in keys:
                pipe.unlink(k)
            n += sum(int(r) for r in pipe.execute())
        finally:
            c.close()
    return n


# ---- events and models --------------------------------------------------------------------
def scale_records(n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """n (key, value) records round-robin over N_MODELS pa models: y = x.w + noise."""
    from clients.producer import encode_event, make_event

    X, y = linear_rows(n, DIM, seed)
    out = []
    for i, (x, v) in enumerate(zip(X, y, strict=True)):
        m = f"m{i % N_MODELS}"
        out.append((m.encode(), encode_event(make_event(m, x, v, id=f"e{i}", ts=0.0))))
    return out


def kind_records(kind: str, d: int, n: int) -> list[tuple[bytes, bytes]]:
    """The learner's own seeded test stream (``_test_stream``), as one model's events."""
    import learners
    from clients.producer import encode_event, make_event

    X, y = learners.REGISTRY[kind]._test_stream(d, n, 0)
    X = np.round(X, 6)
    return [
        (b"m0", encode_event(make_event("m0", x, v, id=f"e{i}", ts=0.0)))
        for i, (x, v) in enumerate(zip(X.tolist(), y, strict=True))
    ]


def make_settings(bootstrap: str, target: RedisTarget, run: str, tag: str, topic: str, parts: int):  # type: ignore[no-untyped-def]
    from service.config import Settings

    return Settings(
        kafka_bootstrap=bootstrap,
        redis_url=target.url,
        key_prefix=f"opscale:{run}:{tag}:",
        events_topic=topic,
        deadletter_topic=f"{topic}.deadletter",
        consumer_group=f"opscale-{run}-{tag}",
        partitions=parts,
    )


async def create_models(target: RedisTarget, settings: Any, specs: list[dict[str, Any]]) -> None:
    from service.store.keys import Keys
    from service.store.registry import create_spec

    client = async_client(target)
    try:
        for spec in specs:
            await create_spec(client, Keys(settings.key_prefix), spec)
    finally:
        await client.aclose()


# ---- the workers --------------------------------------------------------------------------
def scrape(port: int) -> dict[str, Any] | None:
    """The figures this script reads from one worker's ``/metrics`` (None: not answering)."""
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return None
    out: dict[str, Any] = {"processed": 0, "rejected": 0, "pending": 0, "ck_buckets": []}
    for line in text.splitlines():
        if line.startswith("onlinepredict_worker_records_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            value = int(float(line.rsplit(" ", 1)[1]))
            if outcome in HANDLED:
                out["processed"] += value
            if outcome == "rejected":
                out["rejected"] = value
        elif line.startswith("onlinepredict_checkpoint_pending_events "):
            out["pending"] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith("onlinepredict_checkpoint_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out["ck_buckets"].append(
                (math.inf if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1]))
            )
    return out


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative (upper bound, count) pairs."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lo, below = 0.0, 0.0
    for le, cum in buckets:
        if cum >= rank:
            if math.isinf(le):
                return lo  # above the last finite bound: that bound, as Prometheus does
            return lo + (le - lo) * (rank - below) / max(cum - below, 1e-12)
        lo, below = le, cum
    return None


def sum_buckets(per_worker: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    total: dict[float, float] = {}
    for buckets in per_worker:
        for le, n in buckets:
            total[le] = total.get(le, 0.0) + n
    return sorted(total.items())


@dataclass
class Sample:
    t: float
    processed: int
    cpu: float


def run_workers(
    target: RedisTarget, settings: Any, k: int, n: int, shards: ShardLog | None
) -> dict[str, Any]:
    """Start ``k`` workers on the pre-produced topic; follow them until all ``n`` events
    are learned and checkpointed; return the stable-window figures."""
    from service.embedded import free_port

    ports = [free_port() for _ in range(k)]
    procs = []
    for i, port in enumerate(ports):
        env = settings.child_environment(
            ONLINEPREDICT_WORKER_ID=f"scale-{i}",
            ONLINEPREDICT_LOG_LEVEL="WARNING",
            ONLINEPREDICT_WORKER_METRICS_PORT=str(port),
            PYTHONPATH=str(ROOT),
        )
        # set here, not through Settings: the field belongs to the cluster support
        env["ONLINEPREDICT_REDIS_MODE"] = target.mode
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "service.worker"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
            )
        )
    series: list[list[Sample]] = [[] for _ in range(k)]
    last: list[dict[str, Any]] = [{} for _ in range(k)]
    window_at: int | None = None  # index of the first sample with every worker learning
    t_start = time.perf_counter()
    deadline = time.monotonic() + ROW_TIMEOUT_S
    done = False
    try:
        if shards is not None:
            shards.start()
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            now = time.perf_counter()
            for i, (p, port) in enumerate(zip(procs, ports, strict=True)):
                got = scrape(port)
                if got is not None:
                    last[i] = got
                series[i].append(Sample(now, last[i].get("processed", 0), process_cpu_s(p.pid)))
            if window_at is None and all(s[-1].processed > 0 for s in series):
                window_at = len(series[0]) - 1
            if shards is not None:
                shards.drain()
            total = sum(s[-1].processed for s in series)
            if total >= n and all(x.get("pending", 1) == 0 for x in last):
                done = True
                break
            time.sleep(POLL_S)
        lifetime = time.perf_counter() - t_start
        if shards is not None:
            shards.drain()
    finally:
        _bench.stop_processes(procs, 30)  # SIGTERM: each drains and checkpoints
    total = sum(s[-1].processed for s in series) if series[0] else 0
    if not done or window_at is None:
        raise RuntimeError(
            f"{k} worker(s) processed {total} of {n} events in {ROW_TIMEOUT_S:.0f} s"
        )
    per_worker = []
    t_end = t_start
    for s in series:
        w0 = s[window_at]
        # the worker's own last change: its CPU after it ran dry is polling, not learning
        w1 = next(x for x in s if x.processed == s[-1].processed)
        t_end = max(t_end, w1.t)
        ev, cpu = w1.processed - w0.processed, w1.cpu - w0.cpu
        per_worker.append({"events": ev, "cpu": cpu, "rate_cpu": ev / cpu if cpu > 0 else None})
    in_window = sum(w["events"] for w in per_worker)
    wall = t_end - series[0][window_at].t
    cks = [x.get("ck_buckets", []) for x in last]
    return {
        "workers": k,
        "events": in_window,
        "before": total - in_window,
        "wall": wall,
        "rate": in_window / wall if wall > 0 else None,
        "per_worker": per_worker,
        "ck_p99": histogram_quantile(0.99, sum_buckets(cks)),
        "ck_count": sum_buckets(cks)[-1][1] if any(cks) else 0,
        "rejected": sum(x.get("rejected", 0) for x in last),
        "lifetime": lifetime,
    }


# ---- main ---------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=200_000, help="events of the scaling rows")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--modes", default="standalone,cluster")
    ap.add_argument("--kind-scale", type=float, default=1.0, help="times the per-kind event counts")
    ap.add_argument("--no-per-kind", action="store_true")
    args = ap.parse_args()
    started = time.perf_counter()
    info = _bench.machine()
    print(info, flush=True)
    from service.embedded import start_broker

    run = uuid.uuid4().hex[:8]
    broker = start_broker()
    rows: list[dict[str, Any]] = []
    shard_rows: list[list[Any]] = []
    kind_rows: list[list[Any]] = []
    notes: list[str] = []
    removed = 0
    try:
        topic = f"opscale.{run}.events"
        recs = scale_records(args.events, seed=1)
        t_prod = asyncio.run(
            produce(_topic_settings(broker.url, topic, PARTITIONS), recs, ensure=True)
        )
        size = float(np.mean([len(v) for _, v in recs]))
        del recs
        print(
            f"produced {args.events:,} events ({size:.0f} B each) to {PARTITIONS} partitions"
            f" in {t_prod:.1f} s",
            flush=True,
        )
        for mode in args.modes.split(","):
            got = start_target(mode)
            if isinstance(got, str):
                print(got, flush=True)
                notes.append(got)
                continue
            target = got
            try:
                for k in (int(w) for w in args.workers.split(",")):
                    tag = f"{mode}-{k}"
                    settings = make_settings(broker.url, target, run, tag, topic, PARTITIONS)
                    specs = [{"id": f"m{i}", "kind": "pa", "dim": DIM} for i in range(N_MODELS)]
                    asyncio.run(create_models(target, settings, specs))
                    shards = ShardLog(target)
                    try:
                        r = run_workers(target, settings, k, args.events, shards)
                    finally:
                        shards.stop()
                    r["mode"] = mode
                    rows.append(r)
                    for name, us in zip(shards.names, shards.us, strict=True):
                        shard_rows.append([*_shard_row(mode, k, name, us), shards.lost])
                    removed += delete_prefix(target, settings.key_prefix)
                    print(_row_line(r), flush=True)
            finally:
                target.server.stop()
        if not args.no_per_kind:
            target = start_target("standalone")
            assert isinstance(target, RedisTarget)
            try:
                for kind in KINDS:
                    for d in KIND_DIMS:
                        n = round(KIND_EVENTS[kind, d] * args.kind_scale)
                        tag = f"kind-{kind}-{d}"
                        ktopic = f"opscale.{run}.{tag}"
                        settings = make_settings(broker.url, target, run, tag, ktopic, 1)
                        asyncio.run(produce(settings, kind_records(kind, d, n), ensure=True))
                        asyncio.run(
                            create_models(target, settings, [{"id": "m0", "kind": kind, "dim": d}])
                        )
                        r = run_workers(target, settings, 1, n, None)
                        w = r["per_worker"][0]
                        kind_rows.append([kind, d, f"{n:,}", _fmt(r["rate"]), _fmt(w["rate_cpu"])])
                        removed += delete_prefix(target, settings.key_prefix)
                        print(
                            f"{kind} d={d}: {_fmt(r['rate'])} ev/s,"
                            f" {_fmt(w['rate_cpu'])} per CPU s",
                            flush=True,
                        )
            finally:
                target.server.stop()
    finally:
        broker.stop()
    report(
        rows, shard_rows, kind_rows, notes, info, args, size, time.perf_counter() - started, removed
    )


def _topic_settings(bootstrap: str, topic: str, parts: int) -> Any:
    from service.config import Settings

    return Settings(
        kafka_bootstrap=bootstrap,
        events_topic=topic,
        deadletter_topic=f"{topic}.deadletter",
        partitions=parts,
    )


def _fmt(rate: float | None) -> str:
    return "–" if rate is None else f"{rate:,.0f}"


def _shard_row(mode: str, k: int, name: str, us: list[int]) -> list[Any]:
    if not us:
        return [mode, k, name, 0, "–", "–", "–"]
    a = np.asarray(us, dtype=float)
    return [
        mode,
        k,
        name,
        f"{a.size:,}",
        f"{np.percentile(a, 50):.0f}",
        f"{np.percentile(a, 99):.0f}",
        f"{a.sum() / 1e3:,.0f}",
    ]


def _row_line(r: dict[str, Any]) -> str:
    rates = [w["rate_cpu"] for w in r["per_worker"] if w["rate_cpu"]]
    return (
        f"{r['mode']} x{r['workers']}: {_fmt(r['rate'])} ev/s over {r['wall']:.1f} s,"
        f" {_fmt(float(np.mean(rates)))} per CPU s per worker, checkpoint p99"
        f" {1e3 * (r['ck_p99'] or float('nan')):.1f} ms"
    )


def report(rows, shard_rows, kind_rows, notes, info, args, size, elapsed, removed) -> None:  # type: ignore[no-untyped-def]
    base: dict[str, float] = {}
    table_rows = []
    for r in rows:
        rates = [w["rate_cpu"] for w in r["per_worker"] if w["rate_cpu"]]
        mean = float(np.mean(rates))
        if r["workers"] == 1:
            base[r["mode"]] = mean
        one = base.get(r["mode"])
        table_rows.append(
            [
                r["mode"],
                r["workers"],
                _fmt(r["rate"]),
                f"{r['rate'] / rows[[x['mode'] for x in rows].index(r['mode'])]['rate']:.2f}x",
                _fmt(mean),
                _fmt(min(rates)),
                f"{100 * (mean / one - 1):+.0f}%" if one else "–",
                "–" if r["ck_p99"] is None else f"{1e3 * r['ck_p99']:.1f}",
                f"{int(r['ck_count']):,}",
                f"{r['events']:,} ({r['before']:,})",
            ]
        )
    header = [
        "Redis",
        "workers",
        "events/s (wall)",
        "wall vs 1 worker",
        "events per CPU-s per worker (mean)",
        "(lowest worker)",
        "per-CPU vs 1 worker",
        "checkpoint p99 ms",
        "checkpoints",
        "events in window (before it)",
    ]
    main_t = markdown_table(header, table_rows)
    shard_t = markdown_table(
        [
            "Redis",
            "workers",
            "master",
            "checkpoint scripts",
            "p50 µs",
            "p99 µs",
            "server ms total",
            "slow-log entries lost (all masters)",
        ],
        shard_rows,
    )
    kind_t = markdown_table(
        ["kind", "d", "events", "events/s (wall)", "events per CPU-s (one core)"], kind_rows
    )
    verdicts = []
    for r, tr in zip(rows, table_rows, strict=True):
        if r["workers"] > 1 and base.get(r["mode"]):
            dev = float(tr[6].rstrip("%"))
            verdicts.append(
                f"{r['mode']} x{r['workers']}: {tr[6]} "
                f"({'MET' if abs(dev) <= 10 else 'NOT MET'}: within 10% of one worker's)"
            )
    head = (
        f"Machine: {info}. Whole run {elapsed:.0f} s; {removed} benchmark keys deleted afterwards."
        f" Scaling rows: {args.events:,} events (pa, d = {DIM}, {size:.0f} B of JSON each) over"
        f" {N_MODELS} models on {PARTITIONS} partitions, read from the start by each row's own"
        " consumer group; default worker settings (commit every 5,000 events or 2 s)."
        " Broker: embedded tansu (memory). Standalone: one redis-server 6.2; cluster: 3 masters"
        " + 3 replicas. Every process (broker, Redis, workers, this script) shares 2 cores."
    )
    print()
    print(head)
    print()
    print(main_t)
    print()
    for v in verdicts:
        print("-", v)
    for n in notes:
        print("-", n)
    print()
    print(shard_t)
    if kind_rows:
        print()
        print(kind_t)
    text = "\n\n".join(
        [
            "# Scaling across workers (benchmarks/scale.py)",
            head,
            "## Workers x Redis mode",
            main_t,
            "\n".join(f"- {v}" for v in verdicts + notes),
            "## Checkpoint script time per Redis master (server side, slow log)",
            shard_t,
            "## One model, one partition, one worker, per kind",
            kind_t if kind_rows else "(not run)",
        ]
    )
    write(RESULTS / "scale.md", text + "\n")


if __name__ == "__main__":
    main()
