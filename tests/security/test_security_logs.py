"""Redis ACL users end to end, and no secret in any log line or response body.

Our own ``redis-server`` runs with the ``default`` user disabled and one ACL user. The API
(``onlinepredict api``) and a worker run as processes at DEBUG log level with an API key, the
ACL password in the Redis URL and a Kafka SASL password configured; requests with and
without the key, events learned, then Redis SIGKILLed (503s, worker retries) and back, and a
second API with a wrong Redis password. Every captured log line and response body is
searched for each secret.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
import redis as redis_lib

from service.embedded import free_port, redis_answers, redis_server_binary
from service.store.keys import Keys
from tests.service.conftest import FAST, ROOT, WorkerProcess, settings_env, wait_for

pytestmark = [pytest.mark.service]

API_KEY = "api-key-Qv93hT"
REDIS_PW = "redis-pw-Lp27sN"
WRONG_PW = "wrong-pw-Hd55kR"
SASL_PW = "sasl-pw-Mb61xC"
SECRETS = (API_KEY, REDIS_PW, WRONG_PW, SASL_PW)


class AclRedis:
    def __init__(self, data: Path) -> None:
        self.port, self.data = free_port(), data
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [redis_server_binary(), "--bind", "127.0.0.1", "--port", str(self.port)]
            + ["--dir", str(self.data), "--save", "", "--protected-mode", "no"]
            + ["--appendonly", "yes", "--appendfsync", "always"]
            + ["--user", "default", "off", "--user", "op-acl", "on", f">{REDIS_PW}"]
            + ["~*", "&*", "+@all"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(lambda: redis_answers("127.0.0.1", self.port), 30, "ACL redis")

    def url(self, password: str = REDIS_PW) -> str:
        return f"redis://op-acl:{password}@127.0.0.1:{self.port}/0"

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _api(settings, log: Path, port: int) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    env = settings_env(
        settings,
        ONLINEPREDICT_API_PORT=str(port),
        ONLINEPREDICT_LOG_LEVEL="DEBUG",
        # every access line too (off by default): the most the API ever writes
        ONLINEPREDICT_LOG_VERBOSE="true",
        ONLINEPREDICT_KAFKA_SASL_PASSWORD=SASL_PW,
    )
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", "from service.cli import main; main()", "api"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _up(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_acl_redis_works_and_no_secret_is_ever_logged(make_settings, tmp_path: Path) -> None:
    redis = AclRedis(Path(tempfile.mkdtemp(dir=tmp_path)))
    redis.start()
    st = make_settings(**FAST, redis_url=redis.url(), api_key=API_KEY)
    bad = st.model_copy(update={"redis_url": redis.url(WRONG_PW)})
    port, bad_port = free_port(), free_port()
    api = _api(st, tmp_path / "api.log", port)
    bad_api = _api(bad, tmp_path / "bad-api.log", bad_port)
    worker = WorkerProcess(st, "sec", tmp_path)
    worker.start(ONLINEPREDICT_LOG_LEVEL="DEBUG", ONLINEPREDICT_KAFKA_SASL_PASSWORD=SASL_PW)
    base, bad_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{bad_port}"
    bodies: list[str] = []
    key = {"X-API-Key": API_KEY}
    try:
        wait_for(lambda: _up(base) and _up(bad_base), 60, "the APIs")
        with httpx.Client(base_url=base, timeout=30) as c:
            spec = {"id": "sec-m", "kind": "pa", "dim": 2}
            no_key = c.post("/v1/models", json=spec)
            assert no_key.status_code == 401
            assert (
                c.post("/v1/models", json=spec, headers={"X-API-Key": "guess"}).status_code == 401
            )
            assert c.post("/v1/models", json=spec, headers=key).status_code == 201
            events = {"events": [{"x": [1.0, float(i % 3)], "y": float(i)} for i in range(20)]}
            sent = c.post("/v1/models/sec-m/events", json=events, headers=key)
            assert sent.status_code == 202, sent.text
            bodies += [no_key.text, sent.text, c.get("/readyz").text]
            r = redis_lib.Redis.from_url(redis.url())
            keys = Keys(st.key_prefix)
            wait_for(lambda: int(r.hget(keys.state("sec-m"), "applied") or 0) == 20, 60, "learning")
            r.close()
            redis.kill()  # outage: the API answers 503 with the error, the worker retries
            down = c.post("/v1/models/sec-m/predict", json={"x": [1.0, 2.0]}, headers=key)
            assert down.status_code == 503
            bodies += [down.text, c.get("/readyz").text]
            wait_for(
                lambda: "Redis unavailable" in worker.log_text(),
                60,
                "the worker to meet the outage",
            )
            redis.start()
            wait_for(
                lambda: (
                    c.post(
                        "/v1/models/sec-m/predict", json={"x": [1.0, 2.0]}, headers=key
                    ).status_code
                    == 200
                ),
                30,
                "the API after Redis came back",
            )
        with httpx.Client(base_url=bad_base, timeout=30) as c:
            denied = c.get("/readyz")  # ready or not; what failed is in the log only
            assert denied.status_code == 503 and denied.json() == {"status": "unavailable"}
            listed = c.get("/v1/models", headers=key)
            assert listed.status_code == 503
            bodies += [denied.text, listed.text]
    finally:
        worker.stop()
        for p in (api, bad_api):
            p.terminate()
            p.wait(15)
        redis.kill()

    logs = {
        "api": (tmp_path / "api.log").read_text(errors="replace"),
        "bad-api": (tmp_path / "bad-api.log").read_text(errors="replace"),
        "worker": worker.log_text(),
    }
    # the logs did record the events around the secrets (else this test proves nothing)
    assert "Redis unavailable" in logs["worker"] and "DEBUG" in logs["worker"]
    assert "401" in logs["api"] and "503" in logs["api"]
    assert "/readyz: not ready: redis unavailable" in logs["bad-api"]  # the cause, logged
    leaks = [
        (name, s)
        for name, text in [*logs.items(), ("bodies", json.dumps(bodies))]
        for s in SECRETS
        if s in text
    ]
    assert not leaks, leaks
