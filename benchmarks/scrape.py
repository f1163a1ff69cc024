"""The cost of ``/metrics`` with many models, and of the running statistics per event
(issue 19).

1,000 ``pa`` regressors at d = 50, each with a checkpoint written as the worker writes it
after 200 labelled events (learner state, running statistics and the ``figures`` the worker
stores with them: ``service/metrics/figures.py``). In one run:

- ``/metrics`` as served now: the API's ``ApiMetrics.render`` reads each model's stored
  figures (in-process, Redis round trips included, no HTTP);
- the same scrape over the same checkpoints without their ``figures`` field, which is what
  every scrape did before: decode each model's running statistics and solve its d x d
  regret system;
- the running statistics' cost per event at d = 50, with the regret sums and without them
  (what a model wider than ``REGRET_MAX_DIM`` keeps).

Redis: the one at 127.0.0.1:6379 when it answers (keys under a unique prefix, deleted at
the end), else an embedded ``redis-server``.

    python benchmarks/scrape.py [--models 1000] [--dim 50] [--repeat 7]

Prints the table; writes benchmarks/results/scrape.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import _bench  # before numpy: pins BLAS threads
import numpy as np
from _bench import RESULTS, markdown_table, write

EVENTS = 200  # labelled events behind each model's checkpoint


async def seed(redis, keys, n_models: int, dim: int) -> None:  # type: ignore[no-untyped-def]
    import learners
    from learners.codec import encode_state
    from service.metrics import figures
    from service.metrics.running import RunningStats
    from service.store import registry
    from service.store.checkpoints import CheckpointWrite, Counters, Stamp, write_checkpoints

    rng = np.random.default_rng(0)
    writes = []
    for i in range(n_models):
        model = f"m{i:05d}"
        await registry.create_spec(redis, keys, {"id": model, "kind": "pa", "dim": dim})
        learner, stats = learners.build("pa", dim), RunningStats("regression", dim)
        X = rng.normal(size=(EVENTS, dim))
        ys = X @ rng.normal(size=dim)
        for x, y in zip(X, ys, strict=True):
            report = learner.learn(x, float(y))
            stats.update(x, float(y), report.prediction, report.loss, report.diagnostics)
        writes.append(
            CheckpointWrite(
                model=model,
                topic="bench",
                stamp=Stamp(0, EVENTS - 1, f"e{EVENTS - 1}"),
                state=encode_state(learner.state()),
                counters=Counters(applied=EVENTS),
                expected_version=0,
                stats=encode_state(stats.state()),
                figures=figures.encode(figures.of_model(stats, learner, None)),
            )
        )
        if len(writes) == 100:
            await write_checkpoints(redis, keys, writes)
            writes = []
    if writes:
        await write_checkpoints(redis, keys, writes)


async def scrape_ms(store, repeat: int) -> tuple[float, list[float], int]:  # type: ignore[no-untyped-def]
    from service.api.prometheus import ApiMetrics

    metrics = ApiMetrics()
    await metrics.render(store)  # warm: scripts, connections
    times = []
    size = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        size = len(await metrics.render(store))
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times), times, size


def per_event_us(dim: int, regret: bool, n: int = 3000) -> float:
    from service.metrics.running import RunningStats

    rng = np.random.default_rng(1)
    X, ys = rng.normal(size=(n, dim)), rng.normal(size=n)
    stats = RunningStats("regression", dim)
    if not regret:
        stats.regret = None
    t0 = time.perf_counter()
    for x, y in zip(X, ys, strict=True):
        stats.update(x, float(y), 0.0, float(y) ** 2, {})
    return 1e6 * (time.perf_counter() - t0) / n


async def main_async(args: argparse.Namespace) -> str:
    from redis.asyncio import Redis

    from service.api.redis_access import RedisAccess
    from service.store.keys import Keys

    url, embedded = _bench.redis_url()
    prefix = f"opbench:{uuid.uuid4().hex[:10]}:"
    redis = Redis.from_url(url)
    keys = Keys(prefix)
    try:
        t0 = time.perf_counter()
        await seed(redis, keys, args.models, args.dim)
        print(f"seeded {args.models} models in {time.perf_counter() - t0:.1f} s")
        store = RedisAccess(redis, keys)
        now_ms, now_all, now_bytes = await scrape_ms(store, args.repeat)
        async with redis.pipeline(transaction=False) as pipe:
            for i in range(args.models):
                pipe.hdel(keys.state(f"m{i:05d}"), "figures")
            await pipe.execute()
        old_ms, old_all, old_bytes = await scrape_ms(store, args.repeat)
    finally:
        await redis.aclose()
        _bench.delete_prefix(url, prefix)
        if embedded is not None:
            embedded.stop()  # type: ignore[attr-defined]
    with_regret, without = per_event_us(args.dim, True), per_event_us(args.dim, False)
    rows = [
        ["figures stored at checkpoint (now)", f"{now_ms:.0f}", _spread(now_all), now_bytes],
        ["decode statistics + solve (before)", f"{old_ms:.0f}", _spread(old_all), old_bytes],
    ]
    text = "\n\n".join(
        [
            f"# `/metrics` with {args.models:,} models (pa, d = {args.dim})",
            _bench.machine(),
            markdown_table(["scrape", "median ms", "min-max ms", "bytes"], rows),
            f"Ratio: the stored figures scrape in {now_ms / old_ms:.2f}x the time of decoding"
            f" and solving ({old_ms / now_ms:.1f}x faster); median of {args.repeat}.",
            markdown_table(
                [f"running statistics per labelled event, d = {args.dim}", "µs"],
                [
                    ["with the regret sums (d <= REGRET_MAX_DIM)", f"{with_regret:.1f}"],
                    ["without them (d > REGRET_MAX_DIM)", f"{without:.1f}"],
                ],
            ),
        ]
    )
    return text + "\n"


def _spread(times: list[float]) -> str:
    return f"{min(times):.0f}-{max(times):.0f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    text = asyncio.run(main_async(args))
    print(text)
    write(RESULTS / "scrape.md", text)


if __name__ == "__main__":
    main()
