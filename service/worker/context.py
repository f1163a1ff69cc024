"""``WorkerContext``: the composition root of a worker (settings, clients, models, clock)."""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition
from redis.asyncio import Redis

from service.config import Settings
from service.store.keys import Keys
from service.worker.deadletter import DeadLetters
from service.worker.faults import Faults
from service.worker.metrics import WorkerMetrics
from service.worker.models import ModelRuntime


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass
class WorkerStats:
    """Worker-level counters, written to ``worker:{id}`` at each checkpoint."""

    processed: int = 0
    applied: int = 0
    duplicate: int = 0
    rejected: int = 0
    skipped: int = 0  # covered by a stamp (replay after crash or rebalance)
    deadletter: int = 0
    checkpoints: int = 0
    conflicts: int = 0
    voided_stamps: int = 0
    redis_retries: int = 0
    redelivered: int = 0  # records the client handed out twice (dropped)


@dataclass
class WorkerContext:
    settings: Settings
    keys: Keys
    redis: Redis
    consumer: AIOKafkaConsumer
    producer: AIOKafkaProducer
    probe: AIOKafkaConsumer  # group-less consumer that reads the record at a stamp
    deadletters: DeadLetters
    worker_id: str
    faults: Faults = field(default_factory=Faults)
    clock: Callable[[], float] = time.monotonic
    models: dict[str, ModelRuntime] = field(default_factory=dict)
    stats: WorkerStats = field(default_factory=WorkerStats)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # batch vs rebalance callbacks
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # next offset the worker expects per partition, set on every seek: the client may hand
    # a record out twice around a seek, and a record below this is such a repeat
    next_offset: dict[TopicPartition, int] = field(default_factory=dict)
    last_poll: float = 0.0  # clock() at the last poll: /healthz freshness
    generation: int = 0  # bumped on every assignment or seek: fetched batches go stale
    metrics: WorkerMetrics = field(default_factory=WorkerMetrics)  # timings for /metrics
    final_checkpoint: bool = False  # set when the shutdown's checkpoint was written
    stopped_at: float | None = None  # clock() when the stop was requested
