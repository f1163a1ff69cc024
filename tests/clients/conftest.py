"""Fixtures for the client tests: the real API (``service.api.app.create_app``) served by
uvicorn in a thread over the session's real broker and Redis, and, for replay, real
``onlinepredict worker`` processes.

Tests that need the API or a worker are skipped (with the reason) only while those parts
are not in the repository yet.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients._client_support import ServedApi, settings_env

ROOT = Path(__file__).resolve().parents[2]


def _create_app() -> Callable[[Any], Any]:
    try:
        from service.api.app import create_app
    except ImportError as exc:  # the API is built by another issue
        pytest.skip(f"service.api not available yet: {exc}")
    return create_app


@pytest.fixture(scope="session")
def client_settings(make_settings: Callable[..., Any]) -> Any:
    """Settings of their own (topics, group, key prefix) for the client tests."""
    return make_settings()


@pytest.fixture(scope="session")
def api_url(client_settings: Any) -> Iterator[str]:
    served = ServedApi(_create_app()(client_settings)).start()
    try:
        yield served.url
    finally:
        served.stop()


@pytest.fixture(scope="session")
def keyed_api(make_settings: Callable[..., Any]) -> Iterator[tuple[str, str]]:
    """An API with ``api_key`` set: (url, key)."""
    key = "client-test-key-0123456789"
    served = ServedApi(_create_app()(make_settings(api_key=key))).start()
    try:
        yield served.url, key
    finally:
        served.stop()


@pytest.fixture(scope="session")
def cli_env(api_url: str, client_settings: Any) -> dict[str, str]:
    env = settings_env(client_settings)
    env["ONLINEPREDICT_API_URL"] = api_url
    env.pop("ONLINEPREDICT_API_KEY", None)
    return env


@pytest.fixture(scope="session")
def workers(client_settings: Any) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two worker processes (``python -m service.worker``) on the client tests' topics."""
    try:
        import service.worker.main  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"the worker is not available yet: {exc}")
    env = settings_env(client_settings)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "service.worker"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    time.sleep(0.5)
    for p in procs:
        if p.poll() is not None:
            stderr = p.stderr.read().decode() if p.stderr else ""
            pytest.fail(f"worker exited with {p.returncode}: {stderr[-2000:]}")
    try:
        yield procs
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
