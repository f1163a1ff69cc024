"""Stopping the subprocesses that tests start."""

from __future__ import annotations

import subprocess


def terminate(proc: subprocess.Popen, grace: float) -> None:  # type: ignore[type-arg]
    """SIGTERM ``proc`` and wait up to ``grace`` seconds for it; then SIGKILL it and reap it."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
