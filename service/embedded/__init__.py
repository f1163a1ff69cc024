"""Start the wheel-shipped Kafka-compatible broker (``tansu``) and ``redis-server`` locally."""

from __future__ import annotations

from service.embedded.redis_cluster import ClusterNode, RedisClusterServer, start_redis_cluster
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
    "ClusterNode",
    "RedisClusterServer",
    "EmbeddedProcess",
    "broker_answers",
    "free_port",
    "redis_answers",
    "redis_server_binary",
    "start_broker",
    "start_redis",
    "start_redis_cluster",
    "tansu_binary",
]
