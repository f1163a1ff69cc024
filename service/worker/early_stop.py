"""Stop requests that arrive while the worker is still starting.

Python's default SIGTERM action kills the process at once (exit -15), so a worker
SIGTERMed while it imports its modules (a second or so) would die instead of stopping
cleanly. ``hold()`` runs first in ``python -m service.worker``, before any heavy import,
and only records the signal; ``StopSignal.install`` (``service.worker.main``) takes over
and acts on what was recorded. Standard library only, so it is cheap to import first.
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_received: list[int] = []


def _record(signum: int, frame: FrameType | None) -> None:
    _received.append(signum)


def hold() -> None:
    """Record SIGTERM/SIGINT instead of dying of them, until the worker installs its own."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _record)


def received() -> int | None:
    """The first stop signal recorded since ``hold()``, if any."""
    return _received[0] if _received else None
