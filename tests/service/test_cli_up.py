"""``onlinepredict up``: starts what is missing, supervises, stops cleanly; and the
configuration reference ``deploy/.env.example`` is complete."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import redis as redis_lib

from service.config import Settings
from service.embedded import broker_answers, free_port, redis_answers
from tests._wait import wait_for
from tests.service.conftest import ROOT, make_event, port_open, produce, run

ENV_EXAMPLE = ROOT / "deploy" / ".env.example"
WAIT_S = 90.0  # bounds a hang only


def _env_file() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def test_env_example_lists_every_setting_with_its_default() -> None:
    env = _env_file()
    for name, field in Settings.model_fields.items():
        key = f"ONLINEPREDICT_{name.upper()}"
        assert key in env, f"{key} missing from deploy/.env.example"
        default = field.default
        if default is None:
            assert env[key] == "", key
        elif isinstance(default, bool):
            assert env[key].lower() == str(default).lower(), key
        else:
            assert env[key] == str(default), key


def _start_up(args: list[str], **env: str) -> subprocess.Popen[bytes]:
    """``onlinepredict up`` with ``args``, in this environment without its ONLINEPREDICT_*
    settings, plus ``env``; its stdout and stderr piped together."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("ONLINEPREDICT_")}
    # a consumer group of its own, as every other test has: on the session's broker the
    # default group was shared by the `up` tests, and in one CI run the cluster test's
    # workers joined it (as its generation 3) only after 90 s
    full["ONLINEPREDICT_CONSUMER_GROUP"] = f"optest-up-{uuid.uuid4().hex[:8]}"
    full.update(env, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "up", *args],
        cwd=ROOT,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _stop_up(up: subprocess.Popen[bytes], sig: int) -> str:
    """Send ``sig`` (SIGTERM or SIGINT, as Ctrl-C) and wait for the exit; its output."""
    up.send_signal(sig)
    out, _ = up.communicate(timeout=60)
    return out.decode(errors="replace")


def _wait(pred, what: str, detail=lambda: "") -> None:  # type: ignore[no-untyped-def]
    """Until ``pred()``; on timeout the message carries ``detail()`` (where it stood)."""
    wait_for(pred, WAIT_S, what, detail=detail)


@pytest.mark.service
@pytest.mark.slow
def test_up_starts_missing_stack_restarts_a_dead_worker_and_stops_cleanly(tmp_path: Path):
    kport, rport, aport = free_port(), free_port(), free_port()
    prefix = f"optest-up-{uuid.uuid4().hex[:6]}:"
    logs = tmp_path / "logs"
    up = _start_up(
        ["--workers", "1", "--log-dir", str(logs)],
        ONLINEPREDICT_KAFKA_BOOTSTRAP=f"127.0.0.1:{kport}",
        ONLINEPREDICT_REDIS_URL=f"redis://127.0.0.1:{rport}/0",
        ONLINEPREDICT_API_PORT=str(aport),
        ONLINEPREDICT_KEY_PREFIX=prefix,
        ONLINEPREDICT_COMMIT_INTERVAL_S="0.3",
        ONLINEPREDICT_CONSUMER_SESSION_TIMEOUT_MS="6000",
        XDG_DATA_HOME=str(tmp_path / "data"),
    )
    settings = Settings(
        kafka_bootstrap=f"127.0.0.1:{kport}",
        redis_url=f"redis://127.0.0.1:{rport}/0",
        key_prefix=prefix,
    )
    try:
        _wait(lambda: port_open(aport), "the API to listen")
        assert broker_answers("127.0.0.1", kport) and redis_answers("127.0.0.1", rport)
        r = redis_lib.Redis.from_url(settings.redis_url)
        spec = {"id": "up-m", "kind": "pa", "dim": 2, "params": {}}
        r.set(f"{prefix}model:{{up-m}}:spec", json.dumps(spec))
        r.sadd(f"{prefix}models", "up-m")
        state = f"{prefix}model:{{up-m}}:state"
        stats = f"{prefix}worker:up-0"

        def applied() -> int:
            return int(r.hget(state, "applied") or 0)

        run(produce(settings, [make_event("up-m", f"a{i}", [1.0, i], 0.5) for i in range(50)]))
        _wait(lambda: applied() == 50, "the worker to apply the first events")
        pid = int(r.hget(stats, "pid"))
        os.kill(pid, signal.SIGKILL)  # the supervisor must restart it
        _wait(lambda: not _alive(pid), "the worker to die")
        run(produce(settings, [make_event("up-m", f"b{i}", [2.0, i], 0.1) for i in range(50)]))
        _wait(lambda: applied() == 100, "a restarted worker to apply the rest")
        assert int(r.hget(stats, "pid")) != pid
        r.close()
    finally:
        text = _stop_up(up, signal.SIGTERM)
    assert up.returncode == 0, text[-3000:]
    assert "restarting" in text and "onlinepredict stopped." in text
    # everything it started is gone
    assert not broker_answers("127.0.0.1", kport)
    assert not redis_answers("127.0.0.1", rport)
    assert not port_open(aport)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.service
@pytest.mark.slow
def test_up_uses_what_already_answers(kafka_bootstrap, redis_url, key_prefix) -> None:
    aport = free_port()
    up = _start_up(
        ["--workers", "1"],
        ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
        ONLINEPREDICT_REDIS_URL=redis_url,
        ONLINEPREDICT_API_PORT=str(aport),
        ONLINEPREDICT_KEY_PREFIX=f"{key_prefix}up:",
        ONLINEPREDICT_EVENTS_TOPIC=f"optest.up.{uuid.uuid4().hex[:6]}",
    )
    try:
        _wait(lambda: port_open(aport), "the API to listen")
    finally:
        text = _stop_up(up, signal.SIGINT)
    assert up.returncode == 0, text[-3000:]
    assert "using the Kafka broker" in text and "using the Redis" in text
    host, port = kafka_bootstrap.rsplit(":", 1)
    assert broker_answers(host, int(port))  # not ours to stop


def _lines(stream: Any) -> list[str]:
    """Lines of ``stream`` as they arrive (a reader thread), so a test can wait on one."""
    lines: list[str] = []

    def read() -> None:
        for raw in stream:
            lines.append(raw.decode(errors="replace"))

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.mark.service
@pytest.mark.slow
def test_up_exposes_each_workers_metrics_and_observe_scrapes_them(
    kafka_bootstrap, redis_url, key_prefix
) -> None:
    aport, pport = free_port(), free_port()
    observe = shutil.which("prometheus") is not None
    up = _start_up(
        ["--workers", "2", *(["--observe"] if observe else [])],
        ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
        ONLINEPREDICT_REDIS_URL=redis_url,
        ONLINEPREDICT_API_PORT=str(aport),
        ONLINEPREDICT_PROMETHEUS_PORT=str(pport),
        ONLINEPREDICT_KEY_PREFIX=f"{key_prefix}upm:",
        ONLINEPREDICT_EVENTS_TOPIC=f"optest.upm.{uuid.uuid4().hex[:6]}",
    )
    lines = _lines(up.stdout)
    try:
        _wait(lambda: any(ln.startswith("Worker metrics:") for ln in lines), "the metrics line")
        line = next(ln for ln in lines if ln.startswith("Worker metrics:"))
        urls = line.removeprefix("Worker metrics:").split()
        assert len(urls) == 2 and len(set(urls)) == 2, line

        def serving(url: str) -> bool:
            try:
                resp = httpx.get(url, timeout=1)
            except httpx.HTTPError:
                return False
            return resp.status_code == 200 and "onlinepredict_" in resp.text

        for url in urls:
            _wait(lambda url=url: serving(url), f"{url} to serve metrics")
        if observe:
            targets = {urlsplit(u).netloc for u in urls}

            def scraped_up() -> bool:
                try:
                    active = httpx.get(
                        f"http://127.0.0.1:{pport}/api/v1/targets", timeout=1
                    ).json()["data"]["activeTargets"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return False
                healthy = {
                    t["labels"]["instance"]
                    for t in active
                    if t["labels"]["job"] == "onlinepredict-worker" and t["health"] == "up"
                }
                return targets <= healthy

            _wait(scraped_up, "Prometheus to scrape both workers")
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    text = "".join(lines)
    assert up.returncode == 0, text[-3000:]
    for url in urls:  # bound to loopback only, as the API is
        assert f"worker health/metrics on 127.0.0.1:{urlsplit(url).port}" in text, text[-3000:]


@pytest.mark.service
@pytest.mark.slow
def test_up_on_a_redis_cluster_serves_learns_and_stops_it(kafka_bootstrap, key_prefix) -> None:
    """``up --redis-cluster``: a 3 + 3 Redis Cluster started here, the API and workers in
    cluster mode (create, learn, predict, /metrics), all of it stopped on SIGINT."""
    aport = free_port()
    up = _start_up(
        ["--workers", "2", "--redis-cluster"],
        ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
        ONLINEPREDICT_API_PORT=str(aport),
        ONLINEPREDICT_KEY_PREFIX=f"{key_prefix}upc:",
        ONLINEPREDICT_EVENTS_TOPIC=f"optest.upc.{uuid.uuid4().hex[:6]}",
        ONLINEPREDICT_COMMIT_INTERVAL_S="0.3",
    )
    lines = _lines(up.stdout)
    api = f"http://127.0.0.1:{aport}"
    try:
        _wait(lambda: any(ln.startswith("Redis Cluster:") for ln in lines), "the cluster line")
        url = next(ln for ln in lines if ln.startswith("Redis Cluster:")).split()[2]
        with redis_lib.Redis.from_url(url) as node:
            table = node.cluster("NODES")  # {"host:port": {...}} of every node
        assert len(table) == 6, table
        ports = [int(addr.rsplit(":", 1)[1].split("@")[0]) for addr in table]
        _wait(lambda: port_open(aport), "the API to listen")
        models = [f"upc-{i}" for i in range(6)]  # spread over the masters
        with httpx.Client(base_url=api, timeout=10) as http:
            for m in models:
                resp = http.post("/v1/models", json={"id": m, "kind": "pa", "dim": 2})
                assert resp.status_code == 201, resp.text
                events = [{"id": f"{m}-{i}", "x": [1.0, i], "y": 0.5} for i in range(20)]
                assert http.post(f"/v1/models/{m}/events", json={"events": events}).is_success

            def applied() -> list[int]:
                listed = http.get("/v1/models").json()["models"]
                return [(s["status"] or {}).get("applied", 0) for s in listed]

            def stood() -> str:  # a CI run timed out here once: what each model had
                said = [ln for ln in lines if '"GET /v1/models HTTP' not in ln]
                tail = "".join(said[-80:])  # not the access lines of this very wait
                return f"; applied {applied()} of 20 each; up's last lines:\n{tail}"

            learned = "the workers to learn every event"
            _wait(lambda: applied() == [20] * len(models), learned, stood)
            pred = http.post(f"/v1/models/{models[0]}/predict", json={"x": [1.0, 2.0]})
            assert pred.status_code == 200 and pred.json()["model_version"] >= 1, pred.text
            metrics = http.get("/metrics").text
            assert all(f'model="{m}"' in metrics for m in models)
    finally:
        text = _stop_up(up, signal.SIGINT)
    text = "".join(lines) + text
    assert up.returncode == 0, text[-3000:]
    assert not any(redis_answers("127.0.0.1", p) for p in ports)  # the cluster is stopped
