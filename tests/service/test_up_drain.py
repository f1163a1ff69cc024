"""A clean stop of ``onlinepredict up`` loses nothing it accepted (issue 17): events sent to
the API (202) just before Ctrl-C are all learned, once, although the embedded broker keeps
its log in memory; and after the restart on a new, empty log the model goes on learning.
Real broker, Redis, API and workers, each started by ``up`` itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import redis as redis_lib

from service.embedded import broker_answers, free_port, redis_answers
from tests._wait import wait_for
from tests.service.conftest import ROOT, port_open

WAIT_S = 90.0  # bounds a hang only
MODEL = "drain-m"
BATCH = 1000


def _wait(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    wait_for(pred, WAIT_S, what, interval=0.1)


class Up:
    """``onlinepredict up --workers 2`` on free ports, its data under ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.kport, self.rport, self.aport = free_port(), free_port(), free_port()
        self.tmp = tmp
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ONLINEPREDICT_")}
        self.env.update(
            ONLINEPREDICT_KAFKA_BOOTSTRAP=f"127.0.0.1:{self.kport}",
            ONLINEPREDICT_REDIS_URL=f"redis://127.0.0.1:{self.rport}/0",
            ONLINEPREDICT_API_PORT=str(self.aport),
            ONLINEPREDICT_KEY_PREFIX=f"optest-drain-{uuid.uuid4().hex[:6]}:",
            ONLINEPREDICT_CONSUMER_SESSION_TIMEOUT_MS="6000",
            XDG_DATA_HOME=str(tmp / "data"),  # Redis's append-only file lives here
            PYTHONPATH=str(ROOT),
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.aport}"

    def start(self) -> None:
        log = self.tmp / f"up-{self.runs}.out"
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "service.cli", "up", "--workers", "2"]
                + ["--log-dir", str(self.tmp / f"logs-{self.runs}")],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.runs += 1
        _wait(lambda: port_open(self.aport), "the API to listen")

    def stop(self) -> str:
        """SIGTERM (as Ctrl-C does) and wait; the output of this run."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return (self.tmp / f"up-{self.runs - 1}.out").read_text(errors="replace")

    def counters(self) -> dict[str, int]:
        r = redis_lib.Redis.from_url(self.env["ONLINEPREDICT_REDIS_URL"])
        try:
            key = f"{self.env['ONLINEPREDICT_KEY_PREFIX']}model:{{{MODEL}}}:state"
            names = ["applied", "duplicate", "rejected"]
            raw = r.hmget(key, names)
        finally:
            r.close()
        return {k: int(v or 0) for k, v in zip(names, raw, strict=True)}


def _send(client: httpx.Client, start: int, n: int) -> None:
    for lo in range(start, start + n, BATCH):
        events = [{"id": f"e{i}", "x": [1.0, i % 7], "y": 0.5} for i in range(lo, lo + BATCH)]
        res = client.post(f"/v1/models/{MODEL}/events", json={"events": events})
        assert res.status_code == 202, res.text


@pytest.mark.service
@pytest.mark.slow
def test_clean_stop_right_after_the_202s_loses_nothing(tmp_path: Path) -> None:
    n = 8 * BATCH
    up = Up(tmp_path)
    up.start()
    try:
        with httpx.Client(base_url=up.api, timeout=30) as client:
            spec = {"id": MODEL, "kind": "pa", "dim": 2}
            assert client.post("/v1/models", json=spec).status_code == 201
            _send(client, 0, n)
        out = up.stop()  # at once: most of the events are not learned yet
        assert up.proc is not None and up.proc.returncode == 0, out[-3000:]
        assert "draining" in out and "onlinepredict stopped." in out
        assert not broker_answers("127.0.0.1", up.kport)
        assert not redis_answers("127.0.0.1", up.rport)

        up.start()  # the same Redis data, a new (empty) broker log
        assert up.counters() == {"applied": n, "duplicate": 0, "rejected": 0}
        # and it goes on learning on the new log: new events once, re-sent old ids never
        with httpx.Client(base_url=up.api, timeout=30) as client:
            _send(client, n - BATCH // 2, BATCH)  # half re-sent ids (dedupe window), half new
            _wait(lambda: sum(up.counters().values()) >= n + BATCH, "the events after restart")
            status = client.get(f"/v1/models/{MODEL}").json()["status"]
        assert up.counters() == {"applied": n + BATCH // 2, "duplicate": BATCH // 2, "rejected": 0}
        assert not status.get("halted"), status
    finally:
        out = up.stop()
    assert up.proc.returncode == 0, out[-3000:]
    assert not port_open(up.aport)
    assert not broker_answers("127.0.0.1", up.kport)
    assert not redis_answers("127.0.0.1", up.rport)
