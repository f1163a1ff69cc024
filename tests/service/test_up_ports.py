"""Fail fast, never adopt silently (issue 34): an API on a taken port exits 1 at once with a
readable line (it used to hang 11 minutes ignoring SIGTERM); ``up`` reports a taken port or
an API that dies while starting instead of saying "onlinepredict is up"; and ``up`` never
writes into a Redis or broker at an address the user did not name unless it carries this
project's marker. Real broker, Redis and processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis as redis_lib

from service.config import Settings
from service.embedded import free_port, redis_answers, start_broker, start_redis
from service.embedded.topics import ensure_topics_sync
from service.embedded.up import Stack, broker_is_ours, marker_key, port_bindable
from tests._wait import wait_for
from tests.service.conftest import ROOT, port_open

EXIT_S = 60.0  # bounds a hang only (the bug was an 11-minute hang)


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONLINEPREDICT_")}
    env.update(extra, PYTHONPATH=str(ROOT))
    return env


def _run(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=EXIT_S,
    )
    return proc.returncode, proc.stdout.decode(errors="replace")


@pytest.mark.service
def test_api_on_a_taken_port_exits_1_with_a_clear_message(
    held_port, kafka_bootstrap, redis_url
) -> None:
    code, out = _run(
        ["api"],
        _env(
            ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
            ONLINEPREDICT_REDIS_URL=redis_url,
            ONLINEPREDICT_API_PORT=str(held_port),
            ONLINEPREDICT_METRICS_PORT="0",
        ),
    )
    assert code == 1, out[-2000:]
    assert f"cannot listen on 127.0.0.1:{held_port}" in out, out[-2000:]
    assert "Application startup" not in out  # refused before the lifespan started anything


@pytest.mark.service
@pytest.mark.slow
def test_up_on_a_taken_api_port_says_so_and_starts_nothing(
    held_port, kafka_bootstrap, redis_url, key_prefix
) -> None:
    code, out = _run(
        ["up", "--workers", "1"],
        _env(
            ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
            ONLINEPREDICT_REDIS_URL=redis_url,
            ONLINEPREDICT_API_PORT=str(held_port),
            ONLINEPREDICT_KEY_PREFIX=f"{key_prefix}upport:",
        ),
    )
    assert code == 1, out[-2000:]
    assert f"the API port 127.0.0.1:{held_port} is taken" in out, out[-2000:]
    assert "onlinepredict is up" not in out and "started api" not in out, out[-2000:]


@pytest.mark.service
@pytest.mark.slow
def test_up_reports_an_api_that_exits_while_starting(
    kafka_bootstrap, redis_url, key_prefix, tmp_path: Path
) -> None:
    # on a non-loopback host without a key the API refuses to start (docs/security.md)
    code, out = _run(
        ["up", "--workers", "1", "--log-dir", str(tmp_path)],
        _env(
            ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
            ONLINEPREDICT_REDIS_URL=redis_url,
            ONLINEPREDICT_API_HOST="0.0.0.0",
            ONLINEPREDICT_API_PORT=str(free_port()),
            ONLINEPREDICT_METRICS_PORT="0",
            ONLINEPREDICT_KEY_PREFIX=f"{key_prefix}upexit:",
        ),
    )
    assert code == 1, out[-2000:]
    assert "cannot start: the API exited with code 1 while starting" in out, out[-2000:]
    assert "onlinepredict is up" not in out, out[-2000:]
    assert "refusing to start" in (tmp_path / "api.log").read_text()


@pytest.mark.service
@pytest.mark.slow
def test_up_leaves_a_foreign_redis_and_broker_alone_and_adopts_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At an address nobody named: a Redis without the marker and a broker without the
    events topic are someone else's; ``up`` starts its own on free ports, writes nothing
    into theirs, and a later ``up`` adopts what carries the marker."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    prefix = f"optest-foreign-{uuid.uuid4().hex[:6]}:"
    topic = f"optest.foreign.{uuid.uuid4().hex[:6]}"
    theirs_redis = start_redis()
    theirs_broker = start_broker()
    settings = Settings(
        kafka_bootstrap=theirs_broker.url,
        redis_url=theirs_redis.url,
        key_prefix=prefix,
        events_topic=topic,
        deadletter_topic=f"{topic}.dlq",
    )
    stack = Stack(settings, named=frozenset())  # as if both were the defaults
    again = None
    try:
        assert stack.ensure_broker() == "started"
        assert stack.ensure_redis() == "started"
        ours = stack.settings
        assert ours.kafka_bootstrap != theirs_broker.url
        assert ours.redis_url != theirs_redis.url
        ensure_topics_sync(ours)
        env = stack.child_env()  # the children use ours, not theirs
        assert env["ONLINEPREDICT_REDIS_URL"] == ours.redis_url
        assert env["ONLINEPREDICT_KAFKA_BOOTSTRAP"] == ours.kafka_bootstrap
        with redis_lib.Redis.from_url(theirs_redis.url) as r:
            assert r.dbsize() == 0  # not one key written into theirs
        assert not broker_is_ours(settings)  # no topic created in theirs
        with redis_lib.Redis.from_url(ours.redis_url) as r:
            assert r.exists(marker_key(prefix))

        # ours carries the marker (Redis) and the events topic (broker): adopted, unnamed
        again = Stack(ours, named=frozenset())
        assert again.ensure_broker() == "existing"
        assert again.ensure_redis() == "existing"
        assert again.started == []

        # named by the user: used as it is, the marker not needed
        named = Stack(settings, named=frozenset({"redis_url", "kafka_bootstrap"}))
        assert named.ensure_redis() == "existing" and named.ensure_broker() == "existing"
    finally:
        stack.down()
        theirs_broker.stop()
        theirs_redis.stop()


@pytest.mark.service
@pytest.mark.slow
def test_up_with_no_redis_url_set_leaves_the_redis_on_6379_alone(
    kafka_bootstrap, key_prefix, tmp_path: Path
) -> None:
    """End to end at the real default address: whatever Redis answers on 6379 (this
    machine's, or one started here as the stranger) is not used when ONLINEPREDICT_REDIS_URL
    is not set and it has no marker under our prefix; ``up`` starts its own and says so."""
    stranger = None
    if not redis_answers("127.0.0.1", 6379):
        if not port_bindable("127.0.0.1", 6379):
            pytest.skip("something that is not Redis listens on 6379")
        stranger = start_redis(port=6379)
    prefix = f"{key_prefix}up6379-{uuid.uuid4().hex[:6]}:"
    aport = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "up", "--workers", "1"],
        cwd=ROOT,
        env=_env(
            XDG_DATA_HOME=str(tmp_path / "data"),
            ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
            ONLINEPREDICT_API_PORT=str(aport),
            ONLINEPREDICT_METRICS_PORT="0",
            ONLINEPREDICT_KEY_PREFIX=prefix,
            ONLINEPREDICT_EVENTS_TOPIC=f"optest.up6379.{uuid.uuid4().hex[:6]}",
            ONLINEPREDICT_CONSUMER_GROUP=f"optest-up6379-{uuid.uuid4().hex[:6]}",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: port_open(aport) or proc.poll() is not None, EXIT_S, "up to listen")
        made = httpx.post(
            f"http://127.0.0.1:{aport}/v1/models", json={"id": "m6379", "kind": "pa", "dim": 2}
        )
        assert made.status_code == 201, made.text
    finally:
        proc.send_signal(signal.SIGINT)  # as Ctrl-C
        out = proc.communicate(timeout=120)[0].decode(errors="replace")
        try:
            with redis_lib.Redis(port=6379, socket_timeout=2) as r:
                written = list(r.scan_iter(match=f"{prefix}*", count=1000))
        except redis_lib.RedisError:  # a password we do not have: our output must say it
            written = []
        if stranger is not None:
            stranger.stop()
    assert proc.returncode == 0, out[-3000:]
    assert "a Redis at 127.0.0.1:6379 has no" in out and "started our own on" in out, out[-3000:]
    assert written == [], written  # not one key of ours in the stranger's Redis
