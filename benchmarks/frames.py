"""Decode cost per event: binary frames (docs/events.md §6) against JSON, and against Arrow
IPC when pyarrow is importable (it is not a dependency: the layout was chosen by this
measurement; ``PYTHONPATH=<a pyarrow install> .venv/bin/python benchmarks/frames.py``).

Per event, CPU time (best of ``--repeats``), one model, ``--rows`` rows per frame:

- decode: ``orjson.loads`` alone; the worker's JSON decoder (``decode_event``: parse and
  validate); ``decode_frame`` (structure, ids, per-row value checks, one copy of X); Arrow
  IPC read to the same arrays (ids as a list of str, X as an n x d array) with the same
  per-row checks and copy (Arrow's reader checks the structure);
- decode + apply: the worker's per-model path without Kafka or checkpoints, ``pa`` at
  dimension d: ``decode_event`` + ``ModelRuntime.handle_many`` over the same rows against
  ``decode_frame`` + ``frame_apply.apply_frame``;
- worker loop: the real ``take`` (poll, decode, dedupe, learn, checkpoints every 5,000
  events with the seen ids) over the in-memory log and store, JSON records against frames:
  the worker's CPU per event without the Kafka client and Redis I/O.

Writes ``benchmarks/results/frames.md``. Takes ~30 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _bench  # noqa: E402  (pins BLAS threads first)
from benchmarks._report import markdown_table  # noqa: E402
from clients import wire  # noqa: E402
from service.worker.events import decode_event  # noqa: E402
from service.worker.frame_apply import apply_frame  # noqa: E402
from service.worker.frames import Frame, _bad_rows, decode_frame  # noqa: E402
from service.worker.runtime import ModelRuntime  # noqa: E402

OUT = ROOT / "benchmarks/results/frames.md"


def _records(n: int, d: int, seed: int) -> tuple[list[bytes], bytes, list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ np.linspace(-1, 1, d) + 0.1 * rng.standard_normal(n)).tolist()
    ids = [f"ev-{seed}-{i:08d}" for i in range(n)]
    json_values = [
        wire.encode_value(wire.example("m", ids[i], X[i].tolist(), y[i], ts=0.0)) for i in range(n)
    ]
    return json_values, wire.encode_frame("m", ids, X, y, ts=0.0), ids, X


def _arrow(ids: list[str], X: np.ndarray, y: np.ndarray) -> tuple[Callable[[bytes], object], bytes]:
    import pyarrow as pa  # type: ignore[import-not-found]

    n, d = X.shape
    table = pa.table(
        {
            "id": pa.array(ids),
            "x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), d),
            "y": pa.array(y),
            "labelled": pa.array(np.ones(n, dtype=bool)),
        }
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    blob = sink.getvalue().to_pybytes()

    def read(value: bytes) -> object:
        # the same arrays as decode_frame, and the same per-row checks, for the same work
        t = pa.ipc.open_stream(value).read_all()
        xs = t.column("x").combine_chunks().flatten().to_numpy().reshape(n, d)
        frame = Frame(
            "m",
            t.column("id").to_pylist(),
            xs.copy(),
            t.column("y").to_numpy(),
            t.column("labelled").to_numpy(zero_copy_only=False),
            None,
            None,
            wire.LABEL_NUMBER,
            None,
        )
        frame.bad = _bad_rows(frame)
        return frame

    return read, blob


def _each(fn: Callable[[bytes], object], values: list[bytes]) -> Callable[[], object]:
    return lambda: [fn(v) for v in values]


def _keyed(decode: Callable[[bytes, bytes], object]) -> Callable[[bytes], object]:
    return lambda v: decode(b"m", v)


def _per_event(run: Callable[[], object], events: int, repeats: int) -> float:
    """Best CPU microseconds per event of ``run`` (which handles ``events`` events)."""
    run()  # warm-up: imports, first allocations
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        run()
        best = min(best, time.process_time() - t0)
    return best / events * 1e6


def _apply_json(values: list[bytes], batch: int) -> Callable[[], object]:
    def run() -> None:
        rt = ModelRuntime.create({"id": "m", "kind": "pa", "dim": _dim(values)}, None, [],
                                 seen_keep=10_000)  # fmt: skip
        for a in range(0, len(values), batch):
            items = [(decode_event(b"m", v), 0, a + i) for i, v in enumerate(values[a : a + batch])]
            rt.handle_many(items)

    return run


def _apply_frames(frames: list[bytes], d: int) -> Callable[[], object]:
    def run() -> None:
        rt = ModelRuntime.create({"id": "m", "kind": "pa", "dim": d}, None, [], seen_keep=10_000)
        for off, v in enumerate(frames):
            apply_frame(rt, decode_frame(b"m", v), 0, off)

    return run


def _loop(values: list[bytes], d: int, events: int) -> Callable[[], object]:
    """The worker's loop (``take`` and its checkpoints) over ``values`` on the in-memory
    ports, until every record is handled."""
    import asyncio

    from service.config import Settings
    from service.worker.adapters.memory_log import MemoryBroker, MemoryLog
    from service.worker.adapters.memory_store import MemoryStore
    from service.worker.loop import Worker, take
    from service.worker.ports import TopicPartition

    async def go() -> None:
        broker = MemoryBroker({"events": 1})
        store = MemoryStore(worker_id="bench", history_keep=5, seen_keep=10_000)
        store.create({"id": "m", "kind": "pa", "dim": d, "params": {}})
        for v in values:
            broker.append("events", v, b"m", 0)
        settings = Settings(
            events_topic="events",
            deadletter_topic="dead",
            commit_every=5_000,
            commit_interval_s=1e9,
            max_poll_records=500,
        )
        log = MemoryLog(broker)
        w = Worker(settings, log, store, worker_id="bench", clock=lambda: 0.0)
        await log.start()
        await log.subscribe("events", w.rebalance)
        await log.rebalance([TopicPartition("events", 0)])
        while batch := await log.getmany(timeout_ms=0, max_records=500):
            await take(w, batch, w.assignment.generation)
        async with w.lock:
            await w.checkpoint.commit()
        assert store.states["m"].counters.applied == events

    return lambda: asyncio.run(go())


def _dim(values: list[bytes]) -> int:
    return len(orjson.loads(values[0])["x"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=500, help="rows per frame (and per JSON batch)")
    ap.add_argument("--events", type=int, default=20_000, help="events per timed run")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    try:
        import pyarrow  # type: ignore[import-not-found]  # noqa: F401

        arrow = True
    except ImportError:
        arrow = False
    rows = []
    for d in (20, 100):
        json_values, _, _, _ = _records(a.events, d, seed=d)
        frames = []
        arrow_blobs = []
        read_arrow = None
        for s in range(0, a.events, a.rows):
            _, frame, ids, X = _records(a.rows, d, seed=d * 1000 + s)
            frames.append(frame)
            if arrow:
                read_arrow, blob = _arrow(ids, X, np.zeros(a.rows))
                arrow_blobs.append(blob)
        n = a.events
        loads = _per_event(_each(orjson.loads, json_values), n, a.repeats)
        dec_json = _per_event(_each(_keyed(decode_event), json_values), n, a.repeats)
        dec_frame = _per_event(_each(_keyed(decode_frame), frames), n, a.repeats)
        dec_arrow = (
            _per_event(_each(read_arrow, arrow_blobs), n, a.repeats)
            if arrow and read_arrow is not None
            else None
        )
        app_json = _per_event(_apply_json(json_values, a.rows), n, a.repeats)
        app_frame = _per_event(_apply_frames(frames, d), n, a.repeats)
        loop_json = _per_event(_loop(json_values, d, n), n, a.repeats)
        loop_frame = _per_event(_loop(frames, d, n), n, a.repeats)
        rows.append(
            (
                d,
                f"{loads:.2f}",
                f"{dec_json:.2f}",
                f"{dec_frame:.3f}",
                "-" if dec_arrow is None else f"{dec_arrow:.3f}",
                f"{dec_json / dec_frame:.0f}x",
                f"{app_json:.2f}",
                f"{app_frame:.2f}",
                f"{app_json / app_frame:.2f}x",
                f"{loop_json:.2f}",
                f"{loop_frame:.2f}",
                f"{loop_json / loop_frame:.2f}x",
            )
        )
    header = (
        "d",
        "orjson.loads",
        "JSON decode_event",
        f"frame decode ({a.rows} rows)",
        "Arrow IPC read",
        "decode: JSON / frame",
        "JSON decode + handle_many (pa)",
        "frame decode + apply_frame (pa)",
        "decode+apply: JSON / frame",
        "worker loop, JSON",
        "worker loop, frames",
        "loop: JSON / frame",
    )
    table = markdown_table(header, rows)
    text = (
        "# Frames: decode cost per event (CPU microseconds, best of"
        f" {a.repeats})\n\n{_bench.machine()}\n\n{table}\n"
    )
    print(text)
    _bench.write(OUT, text)


if __name__ == "__main__":
    main()
