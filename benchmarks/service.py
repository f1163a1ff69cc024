"""Service throughput: events/s through one worker (1 model, and 100 models, d=20) against
the raw aiokafka consume rate of the same topic in the same run; checkpoint cost per commit
along the stream; worker RSS as the stream grows (issue 9).

Real broker and Redis: an embedded ``tansu`` broker (``service.embedded``) and the Redis at
127.0.0.1:6379 when it answers (keys under a unique prefix, deleted at the end), else an
embedded ``redis-server``. The worker is ``python -m service.worker`` in a subprocess with
the default settings (commit every 5,000 events or 2 s); the events are produced before it
starts and its rate is the slope of its count of learned events (its live ``/metrics``,
polled every 50 ms) from the first learned event to the last, checkpoints in between
included, so start-up and the group join do not count. CPU time (from /proc) is reported
next to wall-clock rates: this machine is shared and loaded, and events per CPU second is
the rate on a dedicated core.

    python benchmarks/service.py [--events 300000] [--many-events 50000]

Prints the tables; writes benchmarks/results/service.md and service.png.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import _bench  # before numpy: pins BLAS threads
import numpy as np
from _bench import RESULTS, ROOT, linear_rows, markdown_table, process_cpu_s, produce, write

DIM = 20
N_MODELS = 100
RSS_AT = 100_000
POLL_S = 0.05


def settings_defaults():  # type: ignore[no-untyped-def]
    from service.config import Settings

    return Settings()


# ---- stack ---------------------------------------------------------------------------------
def start_stack() -> tuple[str, str, list[Any]]:
    from service.embedded import start_broker

    started: list[Any] = [start_broker()]
    redis, server = _bench.redis_url()
    if server is not None:
        started.append(server)
    return started[0].url, redis, started


def make_settings(bootstrap: str, redis: str, run: str, tag: str):  # type: ignore[no-untyped-def]
    from service.config import Settings
    from service.embedded.topics import ensure_topics

    s = Settings(
        kafka_bootstrap=bootstrap,
        redis_url=redis,
        key_prefix=f"opbench:{run}:{tag}:",
        events_topic=f"opbench.{run}.{tag}.events",
        deadletter_topic=f"opbench.{run}.{tag}.deadletter",
        consumer_group=f"opbench-{run}-{tag}",
    )
    asyncio.run(ensure_topics(s))
    return s


def settings_env(settings, worker_id: str) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return settings.child_environment(  # type: ignore[no-any-return]
        ONLINEPREDICT_WORKER_ID=worker_id,
        ONLINEPREDICT_LOG_LEVEL="WARNING",
        PYTHONPATH=str(ROOT),
    )


# ---- events --------------------------------------------------------------------------------
def events(models: list[str], n: int, seed: int) -> list[tuple[bytes, bytes]]:
    """n (key, value) records, round-robin over ``models``: y = x.w + noise, x ~ N(0, I/d)."""
    X, y = linear_rows(n, DIM, seed)
    out = []
    for i, (x, v) in enumerate(zip(X, y, strict=True)):
        m = models[i % len(models)]
        body = {"model": m, "id": f"e{i}", "x": x, "y": v}
        out.append((m.encode(), json.dumps(body, separators=(",", ":")).encode()))
    return out


async def create_models(settings, models: list[str]) -> None:  # type: ignore[no-untyped-def]
    from redis.asyncio import Redis

    from service.store.keys import Keys
    from service.store.registry import create_spec

    client = Redis.from_url(settings.redis_url)
    try:
        for m in models:
            await create_spec(
                client, Keys(settings.key_prefix), {"id": m, "kind": "pa", "dim": DIM}
            )
    finally:
        await client.aclose()


async def raw_consume(settings, n: int, decode: str = "") -> dict[str, float]:  # type: ignore[no-untyped-def]
    """aiokafka alone: assign every partition, read n records from the start; no group, no
    learning, no checkpoint. ``decode``: "" (none), "json" (``json.loads`` each value),
    "orjson", or "event" (the worker's ``decode_event``: orjson plus validation, the
    least any worker on this event format does per record)."""
    import orjson
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    from service.worker.events import decode_event

    one: Any = {
        "": None,
        "json": lambda r: json.loads(r.value),
        "orjson": lambda r: orjson.loads(r.value),
        "event": lambda r: decode_event(r.key, r.value),
    }[decode]
    consumer = AIOKafkaConsumer(
        enable_auto_commit=False,
        max_poll_records=settings.max_poll_records,
        **settings.kafka_options(),
    )
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(settings.events_topic) or set()
        if not parts:
            await consumer._client.force_metadata_update()  # noqa: SLF001
            parts = consumer.partitions_for_topic(settings.events_topic) or set()
        tps = [TopicPartition(settings.events_topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = 0
        t0, c0 = time.perf_counter(), time.process_time()
        while seen < n:
            batch = await consumer.getmany(timeout_ms=500, max_records=settings.max_poll_records)
            for recs in batch.values():
                seen += len(recs)
                if one is not None:
                    for r in recs:
                        one(r)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        await consumer.stop()
    return {"events": seen, "wall": wall, "cpu": cpu}


# ---- the worker ----------------------------------------------------------------------------
def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker_timings(port: int) -> dict[str, float]:
    """Sums and counts of the worker's own ``update_seconds`` / ``checkpoint_seconds``
    histograms from its ``/metrics`` (empty when the worker does not export them)."""
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        for name in ("update_seconds", "checkpoint_seconds"):
            for part in ("sum", "count"):
                head = f"onlinepredict_{name}_{part}"
                if line.startswith(head):
                    key = f"{name}_{part}"
                    out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def learned(port: int) -> int:
    """Events the worker has learned so far: the count of its ``update_seconds``
    histograms on its live ``/metrics`` (0 while it is not answering yet). Only that
    sample is asked for (``name[]``): the whole page cost the worker ~1.7 ms of CPU per
    read at 100 models, ~3% of its CPU at this script's 20 reads a second."""
    import httpx

    try:
        url = f"http://127.0.0.1:{port}/metrics?name[]=onlinepredict_update_seconds_count"
        text = httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return 0
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("onlinepredict_update_seconds_count")
        )
    )


def run_worker(
    settings, n: int, timeout_s: float, on_start=None, root: Path = ROOT
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Start a worker on the pre-produced topic and follow how many events it has learned
    (its live ``/metrics``), until all ``n`` are learned and checkpointed. ``on_start(proc)``
    is called once the process runs (peers.py attaches a profiler there). ``root``: the
    tree whose ``service``, ``learners`` and ``clients`` run (peers.py's ``--baseline``)."""
    import redis as redis_lib

    from service.embedded import free_port
    from service.store.keys import Keys

    wid = f"bench-{uuid.uuid4().hex[:6]}"
    key = Keys(settings.key_prefix).worker(wid)
    client = redis_lib.Redis.from_url(settings.redis_url)
    port = free_port()
    env = settings_env(settings, wid)
    env["ONLINEPREDICT_WORKER_METRICS_PORT"] = str(port)
    env["PYTHONPATH"] = str(root)
    t_start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.worker"], cwd=root, env=env, stdin=subprocess.DEVNULL
    )
    if on_start is not None:
        on_start(proc)
    samples: list[tuple[float, int, float, float]] = []  # (time, applied, cpu s, rss MB)
    rss_at: float | None = None
    rss_series: list[tuple[int, float]] = []  # (applied, RSS MB) at each 100k crossed
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            applied = learned(port)
            now = time.perf_counter()
            if applied and (not samples or applied != samples[-1][1]):
                samples.append((now, applied, process_cpu_s(proc.pid), rss_mb(proc.pid)))
                if rss_at is None and applied >= RSS_AT:
                    rss_at = samples[-1][3]
                if applied >= RSS_AT * (len(rss_series) + 1):
                    rss_series.append((applied, samples[-1][3]))
            if applied >= n:
                raw = client.hget(key, "applied")  # and checkpointed: the last one is timed
                if raw is not None and int(raw) >= n:
                    break
            time.sleep(POLL_S)
        rss_end = rss_mb(proc.pid)
        timings = worker_timings(port)
        t_stop = time.perf_counter()
    finally:
        _bench.stop_processes([proc], 30)  # SIGTERM: the worker drains and checkpoints
        client.close()
    if len(samples) < 2:
        raise RuntimeError(f"worker applied {samples[-1][1] if samples else 0} of {n} events")
    (t0, a0, c0, _), (t1, a1, c1, _) = samples[0], samples[-1]
    return {
        "events": a1 - a0,
        "applied": a1,
        "wall": t1 - t0,
        "cpu": c1 - c0,
        "rss_at": rss_at,
        "rss_end": rss_end,
        "rss_series": rss_series,
        "rss_samples": [(a, r) for _, a, _, r in samples],
        "timings": timings,
        "lifetime": t_stop - t_start,
        "checkpoints_seen": len(samples),
    }


# ---- checkpoint cost (in process, exactly the worker's write) -------------------------------
async def checkpoint_cost(settings, n_models: int, positions: list[int], commits: int):  # type: ignore[no-untyped-def]
    """ms per checkpoint write (``write_checkpoints`` of every touched model, pipelined) after
    ``positions`` events per model, each commit after commit_every / n_models new events
    per model, as the worker does it."""
    from redis.asyncio import Redis

    from service.store.checkpoints import write_checkpoints
    from service.store.keys import Keys
    from service.worker.events import decode_event
    from service.worker.runtime import ModelRuntime

    models = [f"ck{i}" for i in range(n_models)]
    per_commit = max(1, settings.commit_every // n_models)
    total = positions[-1] + len(positions) * commits * per_commit
    recs = events(models, total * n_models, seed=7)
    rts = {
        m: ModelRuntime.create(
            {"id": m, "kind": "pa", "dim": DIM}, None, [], seen_keep=settings.seen_ids_keep
        )
        for m in models
    }
    client = Redis.from_url(settings.redis_url)
    keys = Keys(settings.key_prefix)
    out = []
    offset = 0

    def feed(k: int) -> None:  # as the worker learns a poll: per model, in one go
        nonlocal offset
        for lo in range(offset, offset + k * n_models, 500):
            groups: dict[str, list[Any]] = {}
            for i in range(lo, min(lo + 500, offset + k * n_models)):
                ev = decode_event(*recs[i])
                groups.setdefault(ev.model, []).append((ev, 0, i))
            for m, items in groups.items():
                rts[m].handle_many(items)
        offset += k * n_models

    try:
        done = 0
        for pos in positions:
            feed(max(0, pos - done))
            done = max(done, pos)
            times, sizes = [], []
            for _ in range(commits):
                feed(per_commit)
                done += per_commit
                writes = [rt.checkpoint_write(settings.events_topic) for rt in rts.values()]
                t0 = time.perf_counter()
                results = await write_checkpoints(
                    client,
                    keys,
                    writes,
                    history_keep=settings.history_keep,
                    seen_keep=settings.seen_ids_keep,
                    worker="bench",
                )
                times.append(time.perf_counter() - t0)
                for rt, w, res in zip(rts.values(), writes, results, strict=True):
                    rt.written(res.version, w.token)
                sizes.append(sum(len(w.state) + len(w.stats) for w in writes))
            out.append((pos, float(np.median(times)) * 1e3, float(np.mean(sizes))))
    finally:
        await client.aclose()
    return out


# ---- main ----------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_000_000, help="1-model stream length")
    ap.add_argument("--many-events", type=int, default=50_000, help="100-model stream length")
    args = ap.parse_args()
    started = time.perf_counter()
    info = _bench.machine()
    print(info, flush=True)
    run = uuid.uuid4().hex[:8]
    bootstrap, redis, stack = start_stack()
    prefixes = []
    rows, ck_rows, mem, ck_live = [], [], {}, []
    try:
        for tag, n_models, n in (("one", 1, args.events), ("many", N_MODELS, args.many_events)):
            settings = make_settings(bootstrap, redis, run, tag)
            prefixes.append(settings.key_prefix)
            models = [f"m{i}" for i in range(n_models)]
            asyncio.run(create_models(settings, models))
            recs = events(models, n, seed=1)
            t_prod = asyncio.run(produce(settings, recs))
            del recs
            print(f"{tag}: produced {n} events in {t_prod:.1f} s", flush=True)
            raw = asyncio.run(raw_consume(settings, n))
            dec = asyncio.run(raw_consume(settings, n, decode="json"))
            fast = asyncio.run(raw_consume(settings, n, decode="orjson"))
            floor = asyncio.run(raw_consume(settings, n, decode="event"))
            w = run_worker(settings, n, timeout_s=150)  # keeps the run under 5 minutes
            print(
                f"{tag}: raw {raw['events'] / raw['wall']:,.0f} ev/s, raw+json"
                f" {dec['events'] / dec['wall']:,.0f} ev/s, worker"
                f" {w['events'] / w['wall']:,.0f} ev/s ({w['events'] / w['cpu']:,.0f} per CPU s)",
                flush=True,
            )
            label = f"{n_models} model{'s' if n_models > 1 else ''}, d={DIM}, {n:,} events"
            raw_rate, raw_cpu = raw["events"] / raw["wall"], raw["events"] / raw["cpu"]
            for name, r in (
                ("raw aiokafka consume", raw),
                ("raw consume + json.loads", dec),
                ("raw consume + orjson.loads", fast),
                ("raw consume + decode_event (the worker's: orjson + checks)", floor),
                ("worker (decode, dedupe, learn, stats, checkpoint)", w),
            ):
                rate, per_cpu = r["events"] / r["wall"], r["events"] / max(r["cpu"], 1e-9)
                rows.append(
                    [
                        label,
                        name,
                        f"{rate:,.0f}",
                        f"{per_cpu:,.0f}",
                        f"{100 * rate / raw_rate:.0f}%",
                        f"{100 * per_cpu / raw_cpu:.0f}%",
                    ]
                )
            if n_models == 1:
                mem = {
                    "n": w["applied"],
                    "rss_at": w["rss_at"],
                    "rss_end": w["rss_end"],
                    "series": w["rss_series"],
                    "samples": w["rss_samples"],
                    "busy": w["cpu"] / w["wall"],
                }
            print(f"{tag}: worker CPU busy {100 * w['cpu'] / w['wall']:.0f}% of wall time")
            tm = w["timings"]
            if tm.get("checkpoint_seconds_count"):
                ck_n, ck_s = tm["checkpoint_seconds_count"], tm["checkpoint_seconds_sum"]
                up_n, up_s = max(tm.get("update_seconds_count", 0), 1), tm["update_seconds_sum"]
                ck_live.append(
                    [
                        label,
                        f"{int(ck_n):,}",
                        f"{1e3 * ck_s / ck_n:.2f}",
                        f"{100 * ck_s / w['lifetime']:.0f}%",
                        f"{1e6 * up_s / up_n:.1f}",
                        f"{100 * up_s / w['lifetime']:.0f}%",
                    ]
                )
        ck_settings = make_settings(bootstrap, redis, run, "ck")
        prefixes.append(ck_settings.key_prefix)
        for n_models, positions in ((1, [1_000, 10_000, 100_000]), (N_MODELS, [100, 1_000])):
            for pos, ms, size in asyncio.run(checkpoint_cost(ck_settings, n_models, positions, 20)):
                ck_rows.append([n_models, f"{pos:,}", f"{ms:.2f}", f"{size / 1024:.1f}"])
                print(f"checkpoint: {n_models} models after {pos} events: {ms:.2f} ms", flush=True)
    finally:
        removed = sum(_bench.delete_prefix(redis, p) for p in prefixes)
        for proc in reversed(stack):
            proc.stop()
    elapsed = time.perf_counter() - started
    report(rows, ck_rows, ck_live, mem, info, elapsed, removed)


def report(rows, ck_rows, ck_live, mem, info: str, elapsed: float, removed: int) -> None:  # type: ignore[no-untyped-def]
    header = [
        "stream",
        "consumer",
        "events/s (wall)",
        "events per CPU s",
        "% of raw (wall)",
        "% of raw (CPU)",
    ]
    table = markdown_table(header, rows)
    ck = markdown_table(
        ["models per commit", "events per model before", "median ms per commit", "KiB written"],
        ck_rows,
    )
    live = markdown_table(
        [
            "stream",
            "checkpoints",
            "ms per checkpoint",
            "checkpoint share of worker lifetime",
            "us per learn step",
            "learn share of worker lifetime",
        ],
        ck_live,
    )
    growth = None
    if mem.get("rss_at") and mem.get("rss_end"):
        growth = mem["rss_end"] / mem["rss_at"] - 1.0
    mem_line = (
        f"RSS after {RSS_AT:,} events: {mem.get('rss_at') or float('nan'):.1f} MB; after"
        f" {mem.get('n', 0):,} events: {mem.get('rss_end') or float('nan'):.1f} MB"
        + (f" ({100 * growth:+.1f}%)" if growth is not None else "")
        + ". Series (events: MB): "
        + ", ".join(f"{a:,}: {r:.1f}" for a, r in mem.get("series", []))
        + f". The 1-model worker was CPU-busy {100 * mem.get('busy', float('nan')):.0f}% of"
        " the wall time (the rest: waiting on the broker and Redis)."
    )
    # RSS swings by ~10% within a few thousand events (fetch buffers, checkpoint payloads,
    # malloc trimming), so a single sample at 100k is noise: also compare the medians of
    # every sample over the 100k events after RSS_AT and over the last 100k events.
    early = [r for a, r in mem.get("samples", []) if RSS_AT <= a < 2 * RSS_AT]
    late = [r for a, r in mem.get("samples", []) if a >= mem.get("n", 0) - RSS_AT]
    windowed = None
    if early and late:
        windowed = float(np.median(late)) / float(np.median(early)) - 1.0
        mem_line += (
            f" Medians of every sample (one per 50 ms): {float(np.median(early)):.1f} MB over"
            f" events {RSS_AT:,}-{2 * RSS_AT:,} ({len(early)} samples), "
            f"{float(np.median(late)):.1f} MB over the last {RSS_AT:,} ({len(late)} samples):"
            f" {100 * windowed:+.1f}%."
        )
    verdicts = []
    for r in rows:
        if r[1].startswith("worker"):
            ok = float(r[5].rstrip("%")) >= 50
            verdicts.append(
                [r[0], r[4], r[5], "MET" if ok else "NOT MET", "(verdict on the CPU ratio)"]
            )
    if growth is not None:
        verdicts.append(
            [
                f"RSS growth {RSS_AT:,} -> {mem['n']:,} events",
                "",
                f"{100 * growth:+.1f}%",
                "MET" if growth <= 0.05 else "NOT MET",
                "target: RSS after 1M within 5% of RSS after 100k (a decrease is no leak);"
                " one sample each",
            ]
        )
    if windowed is not None:
        verdicts.append(
            [
                f"RSS growth, medians over events {RSS_AT:,}-{2 * RSS_AT:,} and the last"
                f" {RSS_AT:,}",
                "",
                f"{100 * windowed:+.1f}%",
                "MET" if windowed <= 0.05 else "NOT MET",
                "the same target, robust to RSS swinging within a few thousand events",
            ]
        )
    vt = markdown_table(["what", "wall", "CPU / value", "target", "note"], verdicts)
    print()
    print(vt)
    print()
    print(table)
    print()
    print(ck)
    print()
    print(live)
    print(mem_line)
    text = "\n\n".join(
        [
            "# Service throughput (benchmarks/service.py)",
            f"Machine: {info}. Whole run {elapsed:.0f} s; {removed} benchmark keys deleted"
            " from Redis afterwards. Broker: embedded tansu (memory storage). One worker"
            " process, default settings (max_poll_records"
            f" {settings_defaults().max_poll_records:,}, commit every"
            f" {settings_defaults().commit_every:,} events or"
            f" {settings_defaults().commit_interval_s:g} s, history"
            f" {settings_defaults().history_keep}, seen ids"
            f" {settings_defaults().seen_ids_keep:,}). The worker's rate is the slope of its count"
            " of learned events (live /metrics) from the first to the last one, checkpoints"
            " in between included; CPU rates are events per CPU second of the consuming"
            " process (the robust figure on this shared machine).",
            "## Targets (issue 9)",
            vt,
            "## Worker vs raw consume, same topic, same run",
            table,
            "## Inside the worker (its own update_seconds / checkpoint_seconds histograms)",
            "A learn step is learner.learn plus the running statistics; a checkpoint is the"
            " whole Checkpointer.commit (dead letters, states, Kafka offsets, worker counters)."
            " Shares are of the worker process's lifetime (start-up and group join included).",
            live if ck_live else "(this worker does not export the histograms)",
            "## Checkpoint cost per commit (in process, the worker's write_checkpoints)",
            "Each commit writes every touched model (state, stats, history entry, new seen"
            " ids) in one pipeline; measured after the given number of events per model, 20"
            " commits each, median.",
            ck,
            "## Memory",
            mem_line,
            "![service](service.png)",
        ]
    )
    write(RESULTS / "service.md", text + "\n")
    plot(rows, ck_rows, RESULTS / "service.png")


def plot(rows, ck_rows, path) -> None:  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    from benchmarks._report import save_figure

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4))
    labels = [f"{r[0].split(',')[0]}\n{r[1].split(' (')[0]}" for r in rows]
    a1.barh(range(len(rows)), [float(r[3].replace(",", "")) for r in rows], label="per CPU s")
    a1.barh(
        range(len(rows)),
        [float(r[2].replace(",", "")) for r in rows],
        alpha=0.6,
        label="wall clock",
    )
    a1.set_yticks(range(len(rows)), labels, fontsize=7)
    a1.set_xscale("log")
    a1.xaxis.set_minor_formatter(NullFormatter())  # the 2-9 x 10^k labels overlap
    a1.set_xlabel("events/s (log scale)")
    a1.legend()
    for n_models in sorted({r[0] for r in ck_rows}):
        pts = [r for r in ck_rows if r[0] == n_models]
        a2.plot(
            [int(r[1].replace(",", "")) for r in pts],
            [float(r[2]) for r in pts],
            "o-",
            label=f"{n_models} model(s) per commit",
        )
    a2.set_xscale("log")
    a2.set_xlabel("events per model before the commit")
    a2.set_ylabel("median ms per commit")
    a2.set_ylim(bottom=0)
    a2.legend()
    save_figure(fig, path, dpi=110)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
