"""CPU per JSON event of the worker loop, in-process, without a broker (issue 18).

The real ``Worker`` (``service.worker.loop``) on the in-memory adapters
(``service/worker/adapters/``): a ``MemoryBroker`` topic of 4 partitions holding JSON
examples (``clients.producer``'s encoding, round-robin over the models, as
benchmarks/peers.py produces them), polled ``max_poll_records`` at a time and handed to
``take`` (decode, dedupe, learn, checkpoint into the ``MemoryStore``), as ``run_worker``
does. What it leaves out is the Kafka client (~1.4 us per event, measured in peers.py) and
Redis. ``pa``, d = 20; 1 model and 100 models. The first events warm up (model loading,
the kernels); then 10 runs of ``--events`` events each are timed by process CPU time and
the least kept (on a shared machine other work only adds time). Each tree is measured in
``--rounds`` fresh processes, in turns with the baseline; prints the least and the median.

    python benchmarks/worker_loop.py [--events 10000] [--baseline REV] [--max-poll 500,2000]
        [--profile [--models 100]]

``--baseline REV`` runs the same measurement, in turns, on the ``service``, ``learners``
and ``clients`` trees of git revision ``REV`` (``git archive`` into a temporary directory).
``--max-poll`` measures each tree at each of these ``max_poll_records`` (default: the
setting's default), in turns too. ``--profile`` prints the top of a cProfile of one run of
the working tree (``--models`` of them, 1 by default).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/learners.py would shadow the ``learners`` package of the tree measured
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
TOPIC = "bench.events"
PARTITIONS = 4
DIM = 20
WARM = 5_000
CONFIGS = (1, 100)  # models


def records(n: int, n_models: int, offset: int) -> list[tuple[bytes, bytes]]:
    """``n`` JSON examples round-robin over ``n_models`` models, ids from ``offset``."""
    import numpy as np

    from clients.producer import encode_event, make_event

    rng = np.random.default_rng(offset)
    w = rng.normal(size=DIM)
    X = np.round(rng.normal(size=(n, DIM)) / np.sqrt(DIM), 6)
    y = np.round(X @ w + 0.1 * rng.normal(size=n), 6)
    out = []
    for i, (x, v) in enumerate(zip(X.tolist(), y.tolist(), strict=True)):
        m = f"m{i % n_models}"
        out.append((m.encode(), encode_event(make_event(m, x, v, id=f"e{offset + i}", ts=0.0))))
    return out


async def measure(
    n: int, n_models: int, reps: int = 10, profile: bool = False, max_poll: int | None = None
) -> float:
    """CPU us per event, the least of ``reps`` runs of ``n`` events each after ``WARM``
    warm-up events (the least: on a shared machine, other work only adds time)."""
    import learners
    from service.config import Settings
    from service.worker.adapters.memory_log import MemoryBroker, MemoryLog
    from service.worker.adapters.memory_store import MemoryStore
    from service.worker.loop import Worker, take
    from service.worker.main import tune_gc

    settings = Settings(events_topic=TOPIC, deadletter_topic="bench.dead")
    if max_poll is not None:
        settings = settings.model_copy(update={"max_poll_records": max_poll})
    broker = MemoryBroker({TOPIC: PARTITIONS})
    store = MemoryStore(worker_id="bench")
    for i in range(n_models):
        store.create({"id": f"m{i}", "kind": "pa", "dim": DIM, "params": {}, "assets": None})
    log = MemoryLog(broker)
    w = Worker(settings, log, store, worker_id="bench")
    await log.subscribe(TOPIC, w.rebalance)
    await log.rebalance(broker.partitions(TOPIC))
    learners.load_kernels()
    tune_gc()  # the worker process's collector settings (service/worker/main.py)

    async def consume(upto: int) -> None:
        while w.stats.processed < upto:
            generation = w.assignment.generation
            batch = await log.getmany(timeout_ms=0, max_records=settings.max_poll_records)
            await take(w, batch, generation)

    for key, value in records(WARM, n_models, 0):
        broker.append(TOPIC, value, key)
    await consume(WARM)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
    best = float("inf")
    for rep in range(reps):
        if profiler is not None:
            profiler.disable()  # the worker's work only, not the records' making
        for key, value in records(n, n_models, WARM + rep * n):
            broker.append(TOPIC, value, key)
        if profiler is not None:
            profiler.enable()
        started = time.process_time()
        await consume(WARM + (rep + 1) * n)
        best = min(best, time.process_time() - started)
    if profiler is not None:
        import pstats

        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    st = w.stats
    if (st.applied, st.rejected, st.duplicate, st.skipped) != (WARM + reps * n, 0, 0, 0):
        raise SystemExit(f"unexpected outcomes: {st}")
    return 1e6 * best / max(n, 1)


def child(root: str, n: int, n_models: int, max_poll: int | None) -> float:
    """One measurement in a fresh process on the trees under ``root``."""
    env = {**os.environ, "PYTHONPATH": root, "OPENBLAS_NUM_THREADS": "1"}
    poll = ["--max-poll", str(max_poll)] if max_poll is not None else []
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(n_models), "--events", str(n), *poll],
        env=env,
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["us"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=10_000, help="events per timed run")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree, in turns")
    ap.add_argument("--baseline", help="git revision to compare, measured in turns")
    ap.add_argument("--max-poll", help="max_poll_records values, comma-separated")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--models", type=int, default=1, help="models of the --profile run")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)  # models, in a fresh process
    args = ap.parse_args()
    polls: list[int | None] = (
        [int(v) for v in args.max_poll.split(",")] if args.max_poll else [None]
    )
    if args.child is not None:
        us = asyncio.run(measure(args.events, args.child, max_poll=polls[0]))
        print(json.dumps({"us": us}))
        return
    if args.profile:
        sys.path.insert(0, str(ROOT))
        asyncio.run(measure(args.events, args.models, profile=True, max_poll=polls[0]))
        return
    trees: dict[str, str] = {"working tree": str(ROOT)}
    with tempfile.TemporaryDirectory(prefix="hj-worker-loop-") as tmp:
        if args.baseline:
            # here, not at the top: this tree goes first on sys.path, and the children that
            # measure the baseline import this file
            sys.path.insert(0, str(ROOT))
            from benchmarks._bench import extract_tree

            extract_tree(args.baseline, tmp)
            trees[f"at {args.baseline}"] = tmp
        got: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.rounds):  # in turns: the machine is shared
            for n_models in CONFIGS:
                for name, root in trees.items():
                    for poll in polls:
                        got.setdefault((_named(name, poll), n_models), []).append(
                            child(root, args.events, n_models, poll)
                        )
    print(f"CPU us per JSON event, worker loop on the in-memory adapters, pa, d = {DIM},")
    print(
        f"least of {10 * args.rounds} runs of {args.events:,} events (median of {args.rounds}"
        f" processes' least); load {os.getloadavg()[0]:.1f}"
    )
    for n_models in CONFIGS:
        cells = []
        for name in (_named(t, p) for t in trees for p in polls):
            runs = got[name, n_models]
            cells.append(f"{name} {min(runs):.2f} (median {statistics.median(runs):.2f})")
        print(f"  {n_models:>3} model(s): " + "; ".join(cells))


def _named(tree: str, poll: int | None) -> str:
    return tree if poll is None else f"{tree}, polls of {poll}"


if __name__ == "__main__":
    main()
