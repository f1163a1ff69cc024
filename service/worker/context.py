"""``WorkerContext``: what a worker's components share, built once by ``Worker``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from service.config import Settings
from service.worker.assignment import Assignment
from service.worker.deadletter import DeadLetters
from service.worker.faults import Faults
from service.worker.ports import Log, ModelStore
from service.worker.runtime import ModelRuntime
from service.worker.telemetry import WorkerMetrics, WorkerStats


@dataclass(frozen=True)
class WorkerContext:
    """One worker's settings, its two ports, where it stands in each partition, its models,
    counters, timings and fault switches, the lock between batches and rebalance callbacks,
    and its clock. The objects are shared, not copied: the ``Checkpointer``, ``Rollback``,
    ``Rebalance`` and ``Audit`` of a worker all read and change the same ones."""

    settings: Settings
    log: Log
    store: ModelStore
    assignment: Assignment
    models: dict[str, ModelRuntime]
    stats: WorkerStats
    deadletters: DeadLetters
    metrics: WorkerMetrics
    faults: Faults
    lock: asyncio.Lock
    clock: Callable[[], float]
