"""CPU per event of the scale guard (issue 32; service/metrics/guard.py), against the code
before it.

The worker's learning step, in-process: ``ModelRuntime.handle_many`` over decoded JSON
examples in polls of 500 (what ``process_batch`` hands a model), ``apply_frame`` over
frames of 500 rows (docs/events.md §6), and ``ModelRuntime.handle`` one event at a time
(the per-event path: a poll of one, or the fallback after a refused row). Decoding and the
broker are left out: they do not change. Kinds: ``pa`` (its x is not guarded, its label
is), ``rls`` and ``dvaw-ensemble`` (the README's kind) at d = 20, and ``perceptron`` at
d = 1000 (a cheap learner: the O(d) guard is largest beside it).

Each tree runs in fresh processes (``PYTHONPATH`` = the tree; one per kind, its three
paths in turn), in turns with the other tree; each process times ``--reps`` runs by process
CPU time after a warm-up run and keeps the least (on a shared machine other work only adds
time); the table shows the least over ``--rounds`` processes and the median of their leasts.

    python benchmarks/guard_cost.py [--after REV] [--before REV] [--rounds 2] [--reps 3]

``--before`` defaults to the parent of the commit that added the guard, ``--after`` to
HEAD: both are extracted with ``git archive`` (``_bench.extract_tree``). HEAD holds other
work since (the same files' neighbours), so the after tree also runs with the guard
switched off (``stats.scale = None``): "guard on - off" is the guard's own cost.
Results: benchmarks/results/guard_cost.md.
"""

from __future__ import annotations

import argparse
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
GUARD_COMMIT = "c374190"
CASES = (("pa", 20), ("rls", 20), ("dvaw-ensemble", 20), ("perceptron", 1000))
PATHS = ("json", "frame", "event")
POLL = 500


def _events(kind: str, dim: int, n: int, offset: int) -> tuple[list, object]:  # type: ignore[type-arg]
    import numpy as np

    import learners

    cls = learners.REGISTRY[kind]
    X, Y = cls._test_stream(dim, n, 11 + offset)
    X = np.asarray(X, dtype=np.float64)
    ys = [
        float(v) if cls.task == "regression" else (v.item() if hasattr(v, "item") else v) for v in Y
    ]
    return [X, ys], cls


def measure(kind: str, dim: int, path: str, n: int, reps: int, guard: bool = True) -> float:
    """CPU us per event, the least of ``reps`` runs of ``n`` events (after one warm run)."""
    import numpy as np

    import learners
    from clients import wire
    from service.worker.events import decode_event
    from service.worker.frame_apply import apply_frame
    from service.worker.frames import decode_frame
    from service.worker.runtime import ModelRuntime

    learners.load_kernels()
    spec = {"id": "m", "kind": kind, "dim": dim, "params": {}}
    rt = ModelRuntime.create(spec, None, [], seen_keep=10_000)
    if not guard:  # the same tree without it: what the rest of the tree costs
        rt.stats.scale = None
    best = float("inf")
    offset = 0  # the next record's offset
    for rep in range(reps + 1):
        (X, ys), _ = _events(kind, dim, n, rep)
        ids = [f"e{rep * n + i}" for i in range(n)]
        if path == "frame":
            work = [
                decode_frame(
                    b"m",
                    wire.encode_frame(
                        "m", ids[a : a + POLL], X[a : a + POLL], ys[a : a + POLL], ts=0.0
                    ),
                )
                for a in range(0, n, POLL)
            ]
        else:
            work = [
                decode_event(
                    b"m",
                    json.dumps(
                        {"model": "m", "id": ids[i], "x": X[i].tolist(), "y": ys[i]}
                    ).encode(),
                )
                for i in range(n)
            ]
        started = time.process_time()
        if path == "frame":
            for j, frame in enumerate(work):
                out = apply_frame(rt, frame, 0, offset + j)
                assert out.applied == len(frame), out
            offset += len(work)
        elif path == "json":
            for a in range(0, n, POLL):
                items = [(e, 0, offset + a + i) for i, e in enumerate(work[a : a + POLL])]
                outs = rt.handle_many(items)
                assert all(o == "applied" for o, _ in outs), outs[:3]
            offset += n
        else:
            for i, e in enumerate(work):
                assert rt.handle(e, 0, offset + i) == "applied", rt.last_reason
            offset += n
        elapsed = time.process_time() - started
        if rep:  # the first run warms up (kernels, caches)
            best = min(best, elapsed)
    del np
    return 1e6 * best / n


def child(root: str, kind: str, dim: int, n: int, reps: int, guard: bool) -> dict[str, float]:
    """Every path of one kind, in one fresh process on the tree under ``root``."""
    env = {**os.environ, "PYTHONPATH": root, "OPENBLAS_NUM_THREADS": "1"}
    args = ["--child", kind, str(dim), "--events", str(n), "--reps", str(reps)]
    args += [] if guard else ["--no-guard"]
    out = subprocess.run(
        [sys.executable, __file__, *args],
        env=env,
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def events_for(kind: str) -> int:
    return {"dvaw-ensemble": 1_000, "rls": 3_000}.get(kind, 5_000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--after", default="HEAD")
    ap.add_argument("--before", default=f"{GUARD_COMMIT}^")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--events", type=int, help="events per timed run (default: per kind)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--no-guard", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        kind, dim = args.child
        guard = not args.no_guard
        us = {p: measure(kind, int(dim), p, args.events, args.reps, guard) for p in PATHS}
        print(json.dumps(us))
        return
    sys.path.insert(0, str(ROOT))
    from benchmarks._bench import extract_tree

    got: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="guard-cost-") as tmp:
        trees = {"before": Path(tmp) / "before", "after": Path(tmp) / "after"}
        for name, rev in (("before", args.before), ("after", args.after)):
            trees[name].mkdir()
            extract_tree(rev, trees[name])
        for _ in range(args.rounds):  # in turns: the machine is shared
            for kind, dim in CASES:
                n = args.events or events_for(kind)
                for name, root, guard in (
                    ("before", trees["before"], True),
                    ("after", trees["after"], True),
                    ("after, guard off", trees["after"], False),
                ):
                    us = child(str(root), kind, dim, n, args.reps, guard)
                    print(f"  {kind} {name}: {us}", flush=True)  # as it goes: a long run
                    for path in PATHS:
                        got.setdefault((kind, path, name), []).append(us[path])
    print(
        f"CPU us per event, learning step in-process (before {args.before}, after {args.after});"
        f" least of {args.reps} runs per process, least / median over {args.rounds} processes;"
        f" load {os.getloadavg()[0]:.1f}"
    )
    print(
        "| kind, d | path | before | after | after, guard off | after - before | guard on - off |"
    )
    print("|---|---|---|---|---|---|---|")
    for kind, dim in CASES:
        for path in PATHS:
            b, a = got[kind, path, "before"], got[kind, path, "after"]
            off = got[kind, path, "after, guard off"]
            cell = lambda v: f"{min(v):.2f} / {statistics.median(v):.2f}"  # noqa: E731
            med = statistics.median
            diff, own = med(a) - med(b), med(a) - med(off)
            print(
                f"| {kind}, {dim} | {path} | {cell(b)} | {cell(a)} | {cell(off)}"
                f" | {diff:+.2f} ({100 * diff / med(b):+.0f}%) | {own:+.2f}"
                f" ({100 * own / med(off):+.0f}%) |"
            )


if __name__ == "__main__":
    main()
