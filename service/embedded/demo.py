"""The ``up --demo`` feed: an index tracker on skfolio's 20-stock S&P 500 panel.

Creates the model ``sp500-tracker`` (kind ``apas``, or ``pa`` when APAS is not installed)
and streams the panel through Kafka at a steady rate -- daily returns of the 20 stocks as
``x_t``, the index return as ``y_t`` -- while reporting the live tracking error and the
current top holdings read back from the model's checkpoint in Redis. When the panel ends
it starts over (new event ids), so the counters keep rising. Another ``up --demo`` resumes
where the last one stopped (the row after the last one the model learned, from its
checkpoint's counts) rather than feeding the model the same rows again.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

import learners
from clients import wire
from learners.codec import decode_state
from service.config import Settings
from service.metrics.running import RunningStats
from service.store import registry
from service.store.checkpoints import read_state
from service.store.connect import RedisClient, redis_client
from service.store.keys import Keys

logger = logging.getLogger(__name__)

MODEL_ID = "sp500-tracker"
REPORT_EVERY_S = 2.0


def panel() -> tuple[list[str], np.ndarray, np.ndarray]:
    """(tickers, X returns (T, 20), y index returns (T,)) from skfolio's bundled data."""
    from skfolio.datasets import load_sp500_dataset, load_sp500_index

    prices = load_sp500_dataset()
    index = load_sp500_index()
    joined = prices.join(index.iloc[:, 0].rename("__index__"), how="inner").sort_index()
    returns = joined.pct_change().iloc[1:].dropna()
    tickers = [c for c in returns.columns if c != "__index__"]
    return tickers, returns[tickers].to_numpy(float), returns["__index__"].to_numpy(float)


def demo_spec(tickers: list[str]) -> dict[str, Any]:
    """The demo tracker; its features are the tickers, so /portfolio and /dashboard name them."""
    kind = "apas" if "apas" in learners.REGISTRY else "pa"
    dim = len(tickers)
    spec = {"id": MODEL_ID, "kind": kind, "dim": dim, "params": {}, "features": list(tickers)}
    learners.build(kind, dim)  # fail here, loudly, if the spec is not valid
    return spec


@dataclass
class Report:
    events: int
    applied: int
    tracking_error: float | None
    top: list[tuple[str, float]]
    kind: str


async def read_report(
    redis: RedisClient, keys: Keys, tickers: list[str], sent: int
) -> Report | None:
    stored = await read_state(redis, keys, MODEL_ID)
    if stored is None:
        return None
    learner = learners.load_state(decode_state(stored.state))
    te = None
    if stored.stats:
        te = RunningStats.from_state(decode_state(stored.stats)).figures().get("tracking_error")
    w = np.asarray(getattr(learner, "weights", np.zeros(len(tickers))), dtype=float)
    order = np.argsort(-w)[:5]
    top = [(tickers[i], float(w[i])) for i in order if i < len(tickers)]
    return Report(sent, stored.counters.applied, te, top, learner.kind)


async def _create_once(
    settings: Settings, redis: RedisClient, keys: Keys, producer: Any, spec: dict[str, Any]
) -> int | None:
    """Create the demo model unless it exists, as ``POST /v1/models`` does (its ``created``
    marker, then its spec: a new incarnation); its home partition."""
    stored = await registry.get_spec(redis, keys, MODEL_ID)
    if stored is None:
        incarnation = uuid.uuid4().hex
        marker = registry.created_marker(MODEL_ID, incarnation)
        key, value = wire.encode(marker)
        md = await producer.send_and_wait(settings.events_topic, value, key=key)
        stored = registry.with_origin(spec, incarnation, md.partition, md.offset)
        if await registry.create_spec(redis, keys, stored, topic=settings.events_topic):
            logger.info("created model %s (kind %s)", MODEL_ID, spec["kind"])
        else:  # created meanwhile by someone else
            stored = await registry.get_spec(redis, keys, MODEL_ID) or stored
    return registry.home_partition(stored)


async def resume_position(redis: RedisClient, keys: Keys) -> int:
    """Rows of the demo stream the model has handled (learned or refused): where the next
    feed starts. 0 before its first checkpoint."""
    stored = await read_state(redis, keys, MODEL_ID)
    if stored is None:
        return 0
    return stored.counters.applied + stored.counters.rejected


async def run_demo(
    settings: Settings,
    stop: threading.Event,
    *,
    rate: float = 25.0,
    report: Callable[[Report], None] | None = None,
    limit: int | None = None,
) -> int:
    """Stream the panel at ``rate`` events/s until ``stop``, from where the model's counts
    say the last feed stopped (at most ``limit`` events); returns the events sent."""
    from aiokafka import AIOKafkaProducer

    tickers, X, y = panel()
    keys = Keys(settings.key_prefix)
    redis = redis_client(settings)
    spec = demo_spec(tickers)
    producer = AIOKafkaProducer(linger_ms=5, **settings.kafka_options())
    await producer.start()
    sent = 0
    run_id = time.strftime("%Y%m%dT%H%M%S")
    last_report = 0.0
    try:
        home = await _create_once(settings, redis, keys, producer, spec)
        start = await resume_position(redis, keys)
        if start:
            logger.info(
                "the demo resumes after the %d rows %s has learned (panel row %d of %d)",
                start,
                MODEL_ID,
                start % len(y),
                len(y),
            )
        for epoch, t in _schedule(len(y), start):
            if stop.is_set() or (limit is not None and sent >= limit):
                break
            event = wire.example(MODEL_ID, f"demo-{run_id}-{epoch}-{t}", X[t].tolist(), float(y[t]))
            key, value = wire.encode(event)
            await producer.send(settings.events_topic, value, key=key, partition=home)
            sent += 1
            now = time.monotonic()
            if report is not None and now - last_report >= REPORT_EVERY_S:
                last_report = now
                try:
                    rep = await read_report(redis, keys, tickers, start + sent)
                except Exception as exc:  # a report must never stop the feed
                    logger.debug("demo report failed: %s", exc)
                    rep = None
                if rep is not None:
                    report(rep)
            await asyncio.sleep(1.0 / rate)
        await producer.flush()
    finally:
        await producer.stop()
        await redis.aclose()
    return sent


def _schedule(n: int, start: int = 0) -> Iterator[tuple[int, int]]:
    """(epoch, row) from the ``start``-th row of the endless stream on."""
    epoch, first = divmod(start, n)
    while True:
        for t in range(first, n):
            yield epoch, t
        epoch, first = epoch + 1, 0
