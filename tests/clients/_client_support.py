"""Helpers of the client tests: a uvicorn server in a thread, settings as env, the CLI."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLI_MODULE = "service.cli" if importlib.util.find_spec("service.cli") else "clients.cli"


def run_ok(argv: list[str], env: dict[str, str], timeout: float) -> str:
    """Run a command from the repository root, assert it succeeded; its standard output."""
    r = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServedApi:
    """uvicorn serving one app in a daemon thread."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServedApi:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def settings_env(settings: Any) -> dict[str, str]:
    """The environment that makes a process use ``settings`` (env prefix ONLINEPREDICT_)."""
    return settings.child_environment()  # type: ignore[no-any-return]


def cli(
    *args: str, env: dict[str, str] | None = None, input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would: a separate process, real stdout/stderr/exit code.

    The ``onlinepredict`` command itself (``service.cli``, which mounts the client commands)
    when it exists, else the client commands alone (``clients.cli``).
    """
    return subprocess.run(
        [sys.executable, "-m", CLI_MODULE, *args],
        cwd=ROOT,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
