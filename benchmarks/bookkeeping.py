"""The worker's per-event bookkeeping and the seen window's checkpoint cost (issue 18, item 2).

1. Bookkeeping per event, in-process: the skip/duplicate/learn decisions of a batch plus
   the applied-id bookkeeping (``ids_sum``, the seen window), without the learner, on a
   full 10,000-id window with 1% of the ids re-sent. Peer in the same run: the
   event-by-event loop this replaced (an ``OrderedDict`` of ids, reproduced below as it
   was), checked to give the same outcomes.
2. ``handle_many`` end to end (PA, d = 20), events per second; with ``--baseline REV`` also
   the runtime of that git revision, in the same run.
3. Checkpoint cost of the seen window in Redis (embedded ``redis-server`` unless one answers
   on 127.0.0.1:6379): one model's checkpoint write carrying 10,000 new ids, and the steady
   state (5,000 new ids onto a full window, the default ``commit_every``), median ms per
   write, bytes sent for the window, and the key's ``MEMORY USAGE``; with ``--baseline REV``
   the same through that revision's write script (a sorted set of ids).

    python benchmarks/bookkeeping.py [--baseline 79420a3]

Prints the tables; writes benchmarks/results/bookkeeping.md.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import subprocess
import sys
import tempfile
import time
import types
import uuid
from collections import OrderedDict
from itertools import islice
from pathlib import Path
from typing import Any

import _bench  # before numpy: pins BLAS threads
import numpy as np
from _bench import RESULTS, ROOT, markdown_table

KEEP = 10_000
DIM = 20


# ---- the loop this replaced (service/worker/runtime.py before the SeenWindow) ------------
class LoopWindow:
    def __init__(self, keep: int) -> None:
        from service.store.checkpoints import id_hash

        self.keep, self.id_hash = keep, id_hash
        self.seen: OrderedDict[str, float] = OrderedDict()
        self.applied = self.duplicate = self.ids_sum = 0
        self.new_ids: list[tuple[int, str]] = []

    def _still_seen(self, event_id: str, evictions: int) -> bool:
        if event_id not in self.seen:
            return False
        return evictions <= 0 or event_id not in islice(self.seen, evictions)

    def handle(self, ids: list[str]) -> list[str]:
        decided, todo, batch_ids = [], 0, set()
        slack = self.keep - len(self.seen)
        for event_id in ids:
            if event_id in batch_ids or self._still_seen(event_id, todo - slack):
                decided.append("duplicate")
            else:
                decided.append("applied")
                todo += 1
                batch_ids.add(event_id)
        for event_id, outcome in zip(ids, decided, strict=True):
            if outcome == "applied":
                self.applied += 1
                self.ids_sum = (self.ids_sum + self.id_hash(event_id)) & (2**64 - 1)
                self.seen[event_id] = time.time()
                if len(self.seen) > self.keep:
                    self.seen.popitem(last=False)
                self.new_ids.append((self.applied, event_id))
            else:
                self.duplicate += 1
        return decided


def _new_bookkeeping(rt: Any, items: list[Any]) -> list[str]:
    """``handle_many`` without the learner: decisions, then the applied ids' bookkeeping."""
    codes, _, learned = rt._plan(items)
    return [o for o, _ in rt._settle(items, codes, learned)]


def _stream(n: int, dup_rate: float, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    ids: list[str] = []
    for i in range(n):
        if ids and rng.random() < dup_rate:  # a re-send of a recent id
            ids.append(ids[-1 - int(rng.integers(min(len(ids), 100)))])
        else:
            ids.append(f"{uuid.UUID(int=int(rng.integers(2**62)) * 7919 + i)}")
    return ids


def _events(ids: list[str], offset0: int) -> list[tuple[Any, int, int]]:
    from service.worker.events import Event

    rng = np.random.default_rng(len(ids))
    X = rng.normal(size=(len(ids), DIM))
    y = X @ np.linspace(-1, 1, DIM)
    return [(Event("m", i, X[k].tolist(), float(y[k])), 0, offset0 + k) for k, i in enumerate(ids)]


def bookkeeping(batch: int, n: int = 20_000, rounds: int = 5) -> dict[str, float]:
    """CPU us per event, median of ``rounds`` runs of each, taken in turns."""
    from service.worker.runtime import ModelRuntime

    warm = _stream(KEEP, 0.0, 1)
    ids = _stream(n, 0.01, 2)
    items = _events(ids, KEEP)
    groups = [items[i : i + batch] for i in range(0, n, batch)]
    id_groups = [ids[i : i + batch] for i in range(0, n, batch)]
    t_old, t_new = [], []
    for _ in range(rounds):
        loop = LoopWindow(KEEP)
        loop.handle(warm)
        rt = ModelRuntime.create({"id": "m", "kind": "pa", "dim": DIM}, None, [], seen_keep=KEEP)
        _new_bookkeeping(rt, _events(warm, 0))
        t0 = time.process_time()
        old = [o for g in id_groups for o in loop.handle(g)]
        t_old.append(time.process_time() - t0)
        t0 = time.process_time()
        new = [o for g in groups for o in _new_bookkeeping(rt, g)]
        t_new.append(time.process_time() - t0)
        assert new == old and rt.counters.ids_sum == loop.ids_sum, "outcomes differ"
        assert rt.counters.duplicate == loop.duplicate > 0
    return {
        "old_us": 1e6 * float(np.median(t_old)) / n,
        "new_us": 1e6 * float(np.median(t_new)) / n,
    }


def _load(rev: str, path: str, name: str) -> types.ModuleType:
    """``path`` as it was at git revision ``rev``, imported as module ``name``."""
    src = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:  # imported from a file, as any module is
        file = Path(tmp) / f"{name}.py"
        file.write_text(src)
        spec = importlib.util.spec_from_file_location(name, file)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def end_to_end(runtimes: list[Any], batch: int, n: int = 20_000, rounds: int = 5) -> list[float]:
    """Events per CPU second through ``handle_many`` (PA, d = 20), window full: the median
    of ``rounds`` runs of each runtime class, taken in turns (the machine is shared)."""
    warm = _events(_stream(KEEP, 0.0, 1), 0)
    items = _events(_stream(n, 0.01, 2), KEEP)
    rates: list[list[float]] = [[] for _ in runtimes]
    for _ in range(rounds):
        for k, cls in enumerate(runtimes):
            rt = cls.create({"id": "m", "kind": "pa", "dim": DIM}, None, [], seen_keep=KEEP)
            for i in range(0, KEEP, 500):
                rt.handle_many(warm[i : i + 500])
            t0 = time.process_time()
            for i in range(0, n, batch):
                rt.handle_many(items[i : i + batch])
            rates[k].append(n / (time.process_time() - t0))
    return [float(np.median(r)) for r in rates]


# ---- checkpoint cost ------------------------------------------------------------------------
async def checkpoint_cost(redis_url: str, ck: Any, new_style: bool) -> dict[str, float]:
    """One model: the first write with 10,000 new ids, then 10 steady writes of 5,000."""
    from redis.asyncio import Redis

    from service.store import seen as layout
    from service.store.checkpoints import Counters, Stamp
    from service.store.keys import Keys

    client = Redis.from_url(redis_url)
    keys = Keys(f"opbench:bk:{uuid.uuid4().hex[:8]}:")
    ids = _stream(KEEP + 10 * 5_000, 0.0, 3)
    applied, version, token = 0, 0, ""
    version_marks: list[int] = []  # writes so far: each moves the stamp
    out: dict[str, float] = {}

    async def write(chunk: list[str]) -> tuple[float, int]:
        nonlocal applied, version, token
        pairs = [(applied + 1 + k, i) for k, i in enumerate(chunk)]
        applied += len(chunk)
        seen_kw: dict[str, Any]
        if new_style:
            blob = layout.new_records(pairs)
            seen_kw, sent = {"seen": blob}, len(blob)
        else:
            seen_kw, sent = {"new_ids": pairs}, sum(len(i) + len(str(a)) for a, i in pairs)
        w = ck.CheckpointWrite(
            model="m",
            topic="t",
            stamp=Stamp(0, applied + len(version_marks), "e"),
            state=b"s" * (8 * DIM + 64),
            counters=Counters(applied=applied),
            expected_version=version,
            expected_token=token,
            token=f"t{len(version_marks)}",
            **seen_kw,
        )
        t0 = time.perf_counter()
        (res,) = await ck.write_checkpoints(client, keys, [w], seen_keep=KEEP)
        elapsed = time.perf_counter() - t0
        assert res.outcome == "ok", res
        version, token = res.version, w.token
        version_marks.append(version)
        return elapsed, sent

    try:
        first, sent = await write(ids[:KEEP])
        out["first_ms"], out["first_sent"] = 1e3 * first, sent
        times = []
        for k in range(10):
            lo = KEEP + 5_000 * k
            t, sent = await write(ids[lo : lo + 5_000])
            times.append(t)
        out["steady_ms"], out["steady_sent"] = 1e3 * float(np.median(times)), sent
        out["empty_ms"] = 1e3 * float(np.median([(await write([]))[0] for _ in range(10)]))
        out["memory"] = float(await client.memory_usage(keys.seen("m")) or 0)
        await client.delete(keys.state("m"), keys.history("m"), keys.seen("m"))
    finally:
        await client.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", help="git revision whose runtime and write script to compare")
    args = ap.parse_args()
    lines: list[str] = []

    def emit(text: str) -> None:
        print(text)
        lines.append(text)

    started = time.perf_counter()
    emit(f"Machine: {_bench.machine()}")
    rows = []
    for batch in (500, 50, 5):
        r = bookkeeping(batch)
        rows.append(
            [batch, f"{r['old_us']:.2f}", f"{r['new_us']:.2f}", f"{r['old_us'] / r['new_us']:.1f}x"]
        )
    emit(
        "\nBookkeeping per event (decisions + applied ids), CPU us, window 10,000 full, 1% re-sent"
    )
    emit(markdown_table(["batch", "event loop (replaced)", "SeenWindow", "speed-up"], rows))

    from service.worker.runtime import ModelRuntime

    old_rt = None
    if args.baseline:
        old_rt = _load(args.baseline, "service/worker/runtime.py", "_baseline_runtime").ModelRuntime
    rows = []
    for batch in (500, 50, 5):
        rates = end_to_end([ModelRuntime] + ([old_rt] if old_rt is not None else []), batch)
        row: list[object] = [batch, f"{rates[0]:,.0f}"]
        if old_rt is not None:
            row += [f"{rates[1]:,.0f}", f"{rates[0] / rates[1]:.2f}x"]
        rows.append(row)
    head = ["batch", "events/CPU-s now"]
    if old_rt is not None:
        head += [f"at {args.baseline}", "ratio"]
    emit("\nhandle_many end to end (PA, d = 20), median of 5 runs each, in turns")
    emit(markdown_table(head, rows))

    from service.store import checkpoints as ck_new

    redis_url, server = _bench.redis_url()
    try:
        variants = [("one blob (now)", ck_new, True)]
        if args.baseline:
            ck_old = _load(args.baseline, "service/store/checkpoints.py", "_baseline_ck")
            variants.append((f"sorted set ({args.baseline})", ck_old, False))
        rows = []
        runs: list[list[dict[str, float]]] = [[] for _ in variants]
        for _ in range(3):  # in turns, medians: the machine is shared
            for k, (_, mod, new_style) in enumerate(variants):
                runs[k].append(asyncio.run(checkpoint_cost(redis_url, mod, new_style)))
        for (name, _, _), got in zip(variants, runs, strict=True):
            r = {key: float(np.median([g[key] for g in got])) for key in got[0]}
            rows.append(
                [
                    name,
                    f"{r['first_ms']:.2f}",
                    f"{r['first_sent'] / 1024:.0f} KiB",
                    f"{r['steady_ms']:.2f}",
                    f"{r['steady_sent'] / 1024:.0f} KiB",
                    f"{r['empty_ms']:.2f}",
                    f"{r['memory'] / 1024:.0f} KiB",
                ]
            )
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
    emit("\nCheckpoint of one model's seen window (10,000 ids kept)")
    emit(
        markdown_table(
            [
                "layout",
                "write with 10,000 new ids (ms, median of 3)",
                "sent",
                "write with 5,000 new, full window (ms, median of 10)",
                "sent",
                "write with no new id (ms, median)",
                "Redis memory of the key",
            ],
            rows,
        )
    )
    emit(f"\nWhole run {time.perf_counter() - started:.0f} s.")
    _bench.write(
        RESULTS / "bookkeeping.md",
        "# Bookkeeping and the seen window\n\n" + "\n".join(lines) + "\n",
    )


if __name__ == "__main__":
    main()
