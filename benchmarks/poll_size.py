"""The worker's events/s by ``max_poll_records`` on the real broker (issue 18, JSON goal).

One embedded tansu broker and the Redis of ``service.py``; per configuration (1 model,
300,000 events and 100 models, 100,000 events; JSON, ``pa``, d = 20 by default, 4 partitions, as
``peers.py`` produces them) one topic produced once, then read from its start by the
worker (``python -m service.worker``, ``benchmarks.service.run_worker``) once per poll size
and round, the sizes in turns (the machine is shared: compare within a round), each run
with a fresh consumer group and key prefix.

    python benchmarks/poll_size.py [--sizes 500,2000,5000] [--rounds 2]
        [--events 300000] [--many-events 100000] [--dim 20]

``--dim`` sets d (``x`` of d numbers): at d = 100 an event is ~4x the bytes, so a fetch of
``max_partition_fetch_bytes`` holds a quarter of the events, and a large poll can drain
what was fetched.

Prints events/s (wall), events per CPU-s and the CPU time one full poll takes
(``max_poll_records`` x CPU per event: how long a poll holds the loop before the next).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from typing import Any

import _bench  # before numpy: pins BLAS threads

from benchmarks.peers import another_worker, create_events_topic, json_records
from benchmarks.service import make_settings, run_worker, start_stack

DIM = 20
TIMEOUT_S = 300.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="500,2000,5000")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--events", type=int, default=300_000, help="1-model stream")
    ap.add_argument("--many-events", type=int, default=100_000, help="100-model stream")
    ap.add_argument("--dim", type=int, default=DIM)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bootstrap, redis, stack = start_stack()
    run = uuid.uuid4().hex[:6]
    prefixes: list[str] = []
    topics: dict[int, tuple[Any, int]] = {}
    try:
        for n_models, n in ((1, args.events), (100, args.many_events)):
            tag = f"poll{n_models}"
            asyncio.run(create_events_topic(bootstrap, f"opbench.{run}.{tag}.events"))
            settings = make_settings(bootstrap, redis, run, tag)
            asyncio.run(_bench.produce(settings, json_records(n, args.dim, n_models, seed=1)))
            topics[n_models] = (settings, n)
            print(f"{n_models} model(s): produced {n:,} events", flush=True)
        for rnd in range(args.rounds):
            for n_models, (settings, n) in topics.items():
                for size in sizes:
                    s = another_worker(
                        settings, uuid.uuid4().hex[:6], n_models, args.dim, prefixes
                    ).model_copy(update={"max_poll_records": size})
                    r = run_worker(s, n, TIMEOUT_S)
                    wall, cpu = r["events"] / r["wall"], r["events"] / r["cpu"]
                    print(
                        f"round {rnd + 1}, d = {args.dim}, {n_models:>3} model(s),"
                        f" max_poll_records {size:>5}:"
                        f" {wall:>9,.0f} events/s, {cpu:>9,.0f} per CPU-s,"
                        f" a full poll {1e3 * size / cpu:5.1f} ms of CPU"
                        f" (load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
    finally:
        for p in prefixes + [s.key_prefix for s, _ in topics.values()]:
            _bench.delete_prefix(redis, p)
        for proc in reversed(stack):
            proc.stop()


if __name__ == "__main__":
    main()
