"""Fail-closed start-up and key reload, with real ``onlinepredict api`` processes (real
broker and Redis): production or a non-loopback host without a key exit non-zero with one
line; a malformed key list too, without the secret; the keys file is re-read on SIGHUP and
on a new mtime; the metrics listener serves the per-model figures; ``up`` and the embedded
servers keep the API's keys to the API process."""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service.api import create_app
from service.config import Settings
from service.embedded import free_port
from service.embedded.stack import _spawn
from service.embedded.up import Child, Stack
from tests._procs import terminate
from tests.service.conftest import ROOT, wait_for

SECRET = "startup-secret-Kp29"
OLD, NEW = "file-old-Lm30", "file-new-Nq41"


def api_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = settings.child_environment(PYTHONPATH=str(ROOT), **extra)
    return {k: v for k, v in env.items() if v != ""}


def run_api(settings: Settings, **extra: str) -> subprocess.CompletedProcess[str]:
    """``onlinepredict api`` that must refuse to start (a timeout fails the test)."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", "api"],
        env=api_env(settings, **extra),
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("onlinepredict api: refusing to start: ")
    return lines[0]


def test_production_without_a_key_exits_with_one_line(settings: Settings) -> None:
    line = refused_line(run_api(settings, ONLINEPREDICT_ENV="production"))
    assert "ONLINEPREDICT_ENV=production needs an API key" in line


def test_a_non_loopback_host_without_a_key_exits(settings: Settings) -> None:
    line = refused_line(run_api(settings, ONLINEPREDICT_API_HOST="0.0.0.0"))
    assert "ONLINEPREDICT_ALLOW_ANONYMOUS=true" in line


def test_a_malformed_key_list_exits_without_the_secret(settings: Settings) -> None:
    bad = f"ops:read:{SECRET},ops:rread:{SECRET}"
    line = refused_line(run_api(settings, ONLINEPREDICT_API_KEYS=bad))
    assert "entry 2 ('ops')" in line and "rread" in line and SECRET not in line


@pytest.fixture
def api_proc(settings: Settings, tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """Factory-like: yields (base url, keys file, env) of a started API reading the file."""
    keys = tmp_path / "keys"
    keys.write_text(f"# rotation file\nops:read:{OLD}\n")
    port = free_port()
    env = api_env(
        settings,
        ONLINEPREDICT_API_PORT=str(port),
        ONLINEPREDICT_API_KEYS_FILE=str(keys),
        ONLINEPREDICT_LOG_LEVEL="INFO",
    )
    log = open(tmp_path / "api.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "api"], env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(base + "/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 60, "the API")
        yield base, keys, {"pid": str(proc.pid), "log": str(tmp_path / "api.log")}
    finally:
        terminate(proc, 15)
        log.close()


def status(base: str, secret: str) -> int:
    return httpx.get(base + "/v1/models", headers={"X-API-Key": secret}, timeout=5).status_code


def test_the_keys_file_is_reread_on_sighup(api_proc) -> None:  # type: ignore[no-untyped-def]
    base, keys, info = api_proc
    assert status(base, OLD) == 200 and status(base, NEW) == 401
    before = keys.stat()
    keys.write_text(f"ops:read:{NEW}\n")
    # the same mtime as before: only the signal can make the API see the new file
    os.utime(keys, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert status(base, NEW) == 401
    os.kill(int(info["pid"]), signal.SIGHUP)
    wait_for(lambda: status(base, NEW) == 200, 10, "the new key after SIGHUP")
    assert status(base, OLD) == 401
    log = Path(info["log"]).read_text()
    assert "API keys reloaded" in log and NEW not in log and OLD not in log


def test_the_keys_file_is_reread_when_its_mtime_changes(make_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    keys = tmp_path / "keys"
    keys.write_text(f"ops:read:{OLD}, ops:read:{NEW}  # both during the rotation\n")
    with TestClient(create_app(make_settings(api_keys_file=str(keys)))) as c:
        ok = {s: c.get("/v1/models", headers={"X-API-Key": s}).status_code for s in (OLD, NEW)}
        assert ok == {OLD: 200, NEW: 200}
        keys.write_text(f"ops:read:{NEW}\n")  # the old secret retired
        st = keys.stat()
        os.utime(keys, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        wait_for(
            lambda: c.get("/v1/models", headers={"X-API-Key": OLD}).status_code == 401,
            10,
            "the old key retired",
        )
        assert c.get("/v1/models", headers={"X-API-Key": NEW}).status_code == 200
        # a broken file keeps the keys in force (and says why in the log)
        keys.write_text("ops:read\n")
        os.utime(keys, ns=(st.st_atime_ns, st.st_mtime_ns + 9_000_000_000))
        ring = c.app.state.keyring  # type: ignore[attr-defined]
        assert ring.reload() is False
        assert c.get("/v1/models", headers={"X-API-Key": NEW}).status_code == 200


def test_an_empty_keys_file_is_closed_not_open(make_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    keys = tmp_path / "keys"
    keys.write_text("# no key yet\n")
    with TestClient(create_app(make_settings(api_keys_file=str(keys)))) as c:
        assert c.get("/v1/models").status_code == 401


def test_the_metrics_listener_serves_the_models_without_a_key(make_settings, caplog) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    st = make_settings(api_key=SECRET, metrics_port=port)
    key = {"X-API-Key": SECRET}
    model = f"ml-{uuid.uuid4().hex[:8]}"
    with TestClient(create_app(st)) as c:
        spec = {"id": model, "kind": "pa", "dim": 2}
        assert c.post("/v1/models", json=spec, headers=key).status_code == 201
        assert c.post(f"/v1/models/{model}/predict", json={"x": [1, 2]}, headers=key).status_code
        assert c.get("/metrics").status_code == 401  # the API port: read scope
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert r.status_code == 200 and f'model="{model}"' in r.text
        assert r.headers["content-type"].startswith("text/plain")
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 404
        # a second API on the same host and port: it logs and runs on without a listener
        with caplog.at_level(logging.WARNING), TestClient(create_app(st)) as second:
            assert second.get("/v1/models", headers=key).status_code == 200
        assert "metrics listener not started" in caplog.text
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 200
        assert c.delete(f"/v1/models/{model}", headers=key).status_code == 204
    with pytest.raises(httpx.ConnectError):  # closed with the API
        httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_up_gives_the_keys_to_the_api_child_only(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("ONLINEPREDICT_API_KEY", SECRET)
    monkeypatch.setenv("ONLINEPREDICT_API_KEYS", f"ops:read:{SECRET}x")
    monkeypatch.setenv("ONLINEPREDICT_API_KEYS_FILE", "/etc/onlinepredict/keys")
    monkeypatch.setattr(Child, "start", lambda self: None)  # the env, not the processes
    stack = Stack(Settings(), workers=2)
    stack.start_processes()
    envs = {c.name: c.env for c in stack.children}
    assert set(envs) == {"api", "worker-0", "worker-1"}
    assert envs["api"]["ONLINEPREDICT_API_KEY"] == SECRET
    for name in ("worker-0", "worker-1"):
        assert not any(k.startswith("ONLINEPREDICT_API_KEY") for k in envs[name]), name
        assert not any(SECRET in v for v in envs[name].values()), name
    # the embedded servers (broker, Redis, Prometheus, Grafana) start through _spawn
    out = tmp_path / "env.txt"
    proc = _spawn([sys.executable, "-c", "import os; print(sorted(os.environ))"], log_path=str(out))
    assert proc.wait(30) == 0
    seen = out.read_text()
    assert "PATH" in seen and "ONLINEPREDICT_API_KEY" not in seen


@pytest.mark.parametrize(
    ("over", "refused"),
    [
        ({}, False),  # development on 127.0.0.1: open, as `make up` and the tests need
        ({"api_host": "::1"}, False),
        ({"api_host": "localhost"}, False),
        ({"api_host": "0.0.0.0"}, True),
        ({"api_host": "api.internal"}, True),  # a name may resolve to anything
        ({"api_host": "0.0.0.0", "allow_anonymous": True}, False),  # open on purpose
        ({"env": "production", "allow_anonymous": True}, True),  # never open in production
        ({"env": "production", "api_key": SECRET}, False),
        ({"api_host": "0.0.0.0", "api_keys": f"ops:read:{SECRET}"}, False),
    ],
)
def test_startup_check(over: dict[str, object], refused: bool) -> None:
    from service.api.security import KeyRing, StartupRefused, startup_check

    st = Settings(**over)  # type: ignore[arg-type]
    if refused:
        with pytest.raises(StartupRefused):
            startup_check(st, KeyRing(st))
    else:
        startup_check(st, KeyRing(st))


@pytest.mark.service
@pytest.mark.slow
def test_up_with_keys_the_workers_environment_has_none(
    kafka_bootstrap, redis_url, key_prefix
) -> None:  # type: ignore[no-untyped-def]
    """A real ``onlinepredict up``: its API enforces the keys and serves the metrics
    listener, which ``--observe``'s Prometheus scrapes without a key; its worker
    processes' environments (read from /proc) hold no key."""
    from tests.service.test_cli_up import _lines, _start_up, _wait

    aport, mport, pport = free_port(), free_port(), free_port()
    observe = shutil.which("prometheus") is not None
    up = _start_up(
        ["--workers", "1", *(["--observe"] if observe else [])],
        ONLINEPREDICT_PROMETHEUS_PORT=str(pport),
        ONLINEPREDICT_KAFKA_BOOTSTRAP=kafka_bootstrap,
        ONLINEPREDICT_REDIS_URL=redis_url,
        ONLINEPREDICT_API_PORT=str(aport),
        ONLINEPREDICT_METRICS_PORT=str(mport),
        ONLINEPREDICT_KEY_PREFIX=f"{key_prefix}upk:",
        ONLINEPREDICT_EVENTS_TOPIC=f"optest.upk.{uuid.uuid4().hex[:6]}",
        ONLINEPREDICT_API_KEYS=f"ops:admin:{SECRET}",
        ONLINEPREDICT_API_KEY=OLD,
    )
    lines = _lines(up.stdout)
    base = f"http://127.0.0.1:{aport}"
    try:

        def answers() -> bool:
            try:
                return httpx.get(base + "/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        _wait(answers, "the API")
        assert httpx.get(base + "/v1/models", timeout=5).status_code == 401
        for secret in (SECRET, OLD):
            r = httpx.get(base + "/v1/models", headers={"X-API-Key": secret}, timeout=5)
            assert r.status_code == 200
        r = httpx.get(f"http://127.0.0.1:{mport}/metrics", timeout=5)
        assert r.status_code == 200 and "onlinepredict_api_redis_up" in r.text
        text = "".join(lines)
        pids = {name: int(pid) for name, pid in re.findall(r"started (\S+) \(pid (\d+)\)", text)}
        assert {"api", "worker-0"} <= set(pids), text[-3000:]
        environ = {
            name: Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            for name, pid in pids.items()
        }
        assert any(e.startswith(b"ONLINEPREDICT_API_KEYS=") for e in environ["api"])
        worker = environ["worker-0"]
        assert not any(e.startswith(b"ONLINEPREDICT_API_KEY") for e in worker)
        assert not any(SECRET.encode() in e or OLD.encode() in e for e in worker)
        if observe:

            def api_scraped() -> bool:
                try:
                    url = f"http://127.0.0.1:{pport}/api/v1/targets"
                    active = httpx.get(url, timeout=1).json()["data"]["activeTargets"]
                except (httpx.HTTPError, ValueError, KeyError):
                    return False
                return any(
                    t["labels"]["job"] == "onlinepredict-api"
                    and t["labels"]["instance"] == f"127.0.0.1:{mport}"
                    and t["health"] == "up"
                    for t in active
                )

            _wait(api_scraped, "Prometheus to scrape the API's metrics listener")
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(90)
