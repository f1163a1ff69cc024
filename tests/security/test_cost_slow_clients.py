"""Slow clients cannot hold the server (issue 31, item 3): 300 slow connections (slow
headers, slow bodies) leave ``/healthz`` and a keyed predict answering; the header and
body timeouts close such connections; a client that leaves before its answer is a 499 in
the latency histogram and one log line. A real ``onlinepredict api`` process (or uvicorn
in a thread with the same protocol classes), real Redis and broker; loopback only."""

from __future__ import annotations

import re
import resource
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api import create_app
from service.api.http import h11_protocol_class, protocol_class
from tests._procs import terminate

pytestmark = [pytest.mark.service]

ROOT = Path(__file__).resolve().parents[2]
KEYS = "ops:admin:ops-secret-1,app:predict:app-secret-1"
OPS = {"X-API-Key": "ops-secret-1"}
APP = {"X-API-Key": "app-secret-1"}
SLOW = 300  # the issue's figure: more than the 256 descriptors it saw
CLIENT_TIMEOUT_S = 5.0  # the bound on the answers the test waits for
ISSUE_FD_LIMIT = 256


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(pred: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _low_fd_limit() -> None:  # in the child, before exec: the issue's soft limit
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (ISSUE_FD_LIMIT, hard))


@pytest.fixture(scope="module")
def api(make_settings, tmp_path_factory) -> Iterator[tuple[str, Path]]:  # type: ignore[no-untyped-def]
    # long timeouts: the slow connections stay open for the whole check
    st = make_settings(api_keys=KEYS, header_timeout_s=60, body_timeout_s=60)
    port = _free_port()
    log = tmp_path_factory.mktemp("api") / "api.log"
    env = st.child_environment(
        ONLINEPREDICT_API_PORT=str(port), ONLINEPREDICT_LOG_LEVEL="INFO", PYTHONPATH=str(ROOT)
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "api"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=_low_fd_limit,
        )
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        _wait(up, 60, "the API process")
        yield url, log
    finally:
        terminate(proc, 10)


def _slow_connections(port: int, n: int) -> list[socket.socket]:
    """Half send an unfinished header block, half a whole header block and 10 of 1000
    declared body bytes; all then say nothing more."""
    socks: list[socket.socket] = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S)
        if i % 2 == 0:
            s.sendall(b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        else:
            s.sendall(
                b"POST /v1/models/m/predict HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"x": [1.0'
            )
        socks.append(s)
    return socks


def _open(s: socket.socket) -> bool:
    """Nothing received and not closed by the server."""
    s.settimeout(0)  # non-blocking: a peek that would wait raises BlockingIOError
    try:
        s.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def test_300_slow_connections_leave_healthz_and_a_keyed_predict_answering(api) -> None:  # type: ignore[no-untyped-def]
    url, log = api
    port = int(url.rsplit(":", 1)[1])
    mid = f"slow-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT_S) as http:
        spec = {"id": mid, "kind": "pa", "dim": 2}
        assert http.post("/v1/models", json=spec, headers=OPS).status_code == 201
        socks = _slow_connections(port, SLOW)
        try:
            assert http.get("/healthz").status_code == 200
            r = http.post(f"/v1/models/{mid}/predict", json={"x": [1.0, 2.0]}, headers=APP)
            assert r.status_code == 200, r.text[:300]
            # they were all still held open while the server answered (60 s timeouts)
            assert sum(_open(s) for s in socks) == SLOW
        finally:
            for s in socks:
                s.close()
    # with 256 descriptors the 300 would have starved the listener: the API raised it
    assert "open-files limit raised from 256" in log.read_text(errors="replace")


def test_a_client_that_leaves_mid_body_is_a_499_in_one_log_line(api) -> None:  # type: ignore[no-untyped-def]
    url, log = api
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT_S) as s:
        s.sendall(
            b"POST /v1/models/gone/events HTTP/1.1\r\nHost: x\r\nX-API-Key: ops-secret-1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"x": [1'
        )
    sample = re.compile(
        r'onlinepredict_http_request_duration_seconds_count\{method="POST",'
        r'route="/v1/models/\{model_id\}/events",status="499"\} ([0-9.]+)'
    )

    def counted() -> bool:
        text = httpx.get(f"{url}/metrics", headers=OPS, timeout=CLIENT_TIMEOUT_S).text
        m = sample.search(text)
        return m is not None and float(m.group(1)) >= 1

    _wait(counted, 30, "the 499 in the latency histogram")
    text = log.read_text(errors="replace")
    # (the other test's slow bodies, closed, are 499s on predict: this one is on events)
    lines = [line for line in text.splitlines() if "/v1/models/gone/events" in line]
    assert len(lines) == 1 and "disconnected before its answer" in lines[0], lines
    assert lines[0].endswith("(499)")
    assert "Traceback" not in text and "ClientDisconnect" not in text


class _Served:
    """uvicorn in a thread with the API and one of our protocol classes."""

    def __init__(self, app: Any, http: type) -> None:
        import uvicorn

        self.port = _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning", http=http
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _wait(lambda: self.server.started, 30, "uvicorn")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.mark.parametrize("make_protocol", [protocol_class, h11_protocol_class])
def test_the_header_and_body_timeouts_close_slow_connections(make_settings, make_protocol) -> None:  # type: ignore[no-untyped-def]
    st = make_settings(header_timeout_s=1.0, body_timeout_s=1.0)
    served = _Served(create_app(st), make_protocol(st))
    try:
        socks = _slow_connections(served.port, 20)
        try:
            for s in socks:
                s.settimeout(30)  # the bound: the server acts within ~1 s
            answers = [s.recv(4096) for s in socks]
        finally:
            for s in socks:
                s.close()
        slow_headers, slow_bodies = answers[0::2], answers[1::2]
        assert all(a == b"" for a in slow_headers), slow_headers[:2]  # closed, no answer
        for a in slow_bodies:
            assert a.startswith(b"HTTP/1.1 408 "), a[:200]
            assert b"ONLINEPREDICT_BODY_TIMEOUT_S" in a and b"connection: close" in a.lower()
        # the server still serves, and a keep-alive connection gets the header timeout again
        # only after its answer: a second request on it, sent at once, is answered
        with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=10) as http:
            assert http.get("/healthz").status_code == 200
            assert http.get("/healthz").status_code == 200
    finally:
        served.stop()
