"""``onlinepredict worker``: run one worker until SIGTERM/SIGINT, then stop within a bound.

The stop is bounded in every state (docs/reliability.md, "Stopping"): the shutdown steps
share ``worker_stop_timeout_s`` (``run_worker``), and a watchdog thread, armed by the
signal itself, ends the process at the bound if they have not finished: a learning batch
holds the event loop, so only a thread can keep that promise.

With ``drain`` (``onlinepredict worker --drain``) the worker first learns to the end of the
log for up to ``drain_timeout_s`` (``service.worker.drain``), and the bound grows by as
much; a second SIGTERM/SIGINT cuts the drain short.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
import threading
from types import FrameType

from service.config import Settings
from service.gc_tuning import freeze_startup_objects
from service.worker import early_stop
from service.worker.loop import run_worker

logger = logging.getLogger(__name__)

EXIT_NO_CHECKPOINT = 3  # stopped without its final checkpoint (the events are replayed)
EXIT_WATCHDOG = 4  # still not stopped at the bound: ended by the watchdog


class StopSignal:
    """Sets the worker's stop event and arms the watchdog at the first SIGTERM/SIGINT."""

    def __init__(self, loop: asyncio.AbstractEventLoop, bound_s: float, what: str = "") -> None:
        self.loop = loop
        self.bound_s = bound_s
        self.what = what or "ONLINEPREDICT_WORKER_STOP_TIMEOUT_S"  # the bound, for the log
        self.stop = asyncio.Event()
        self.hurry = asyncio.Event()  # a second signal: cut a drain short
        self.phase = "starting"  # what the worker was doing, for the watchdog's log line
        self._armed: threading.Timer | None = None

    def install(self) -> None:
        for sig in early_stop.STOP_SIGNALS:
            signal.signal(sig, self._on_signal)
        signum = early_stop.received()
        if signum is not None:  # asked to stop while starting (python -m service.worker)
            self._on_signal(signum, None)
            self.stop.set()  # now, not on the loop's next turn: run_worker checks it first

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._armed is None:
            self._armed = threading.Timer(self.bound_s, self._expire)
            self._armed.daemon = True
            self._armed.start()
            logger.info("%s: stopping within %.0f s", signal.Signals(signum).name, self.bound_s)
        elif not self.hurry.is_set():
            logger.info("%s again: stopping without draining", signal.Signals(signum).name)
            self.loop.call_soon_threadsafe(self.hurry.set)
        self.loop.call_soon_threadsafe(self.stop.set)

    def _expire(self) -> None:
        logger.error(
            "worker did not stop within %s=%.0f s"
            " (it was %s); exiting without a final checkpoint: its events are replayed",
            self.what,
            self.bound_s,
            self.phase,
        )
        logging.shutdown()
        os._exit(EXIT_WATCHDOG)

    def disarm(self) -> None:
        if self._armed is not None:
            self._armed.cancel()


async def _serve(settings: Settings, worker_id: str | None, drain: bool) -> int:
    drain_s = settings.drain_timeout_s if drain else 0.0
    bound = settings.worker_stop_timeout_s + drain_s
    what = "ONLINEPREDICT_DRAIN_TIMEOUT_S + ONLINEPREDICT_WORKER_STOP_TIMEOUT_S" if drain_s else ""
    stopper = StopSignal(asyncio.get_running_loop(), bound, what)
    stopper.install()
    worker = await run_worker(
        settings,
        stop=stopper.stop,
        worker_id=worker_id,
        phase=stopper,
        drain_s=drain_s,
        hurry=stopper.hurry,
    )
    stopper.disarm()
    return 0 if worker.final_checkpoint else EXIT_NO_CHECKPOINT


# Each JSON event makes a few container objects (its dict, its x, its Event) that live
# until their batch is learned; with the default threshold (700) a young collection ran
# every ~200 events and promoted each polled batch to be scanned again. At 50,000 the
# worker loop is 15-20% cheaper per JSON event (benchmarks/README.md); what the worker
# keeps for long (models, windows) is few large numpy arrays, not many small objects.
GC_THRESHOLD = (50_000, 20, 20)


def tune_gc() -> None:
    """Freeze what start-up made (``service.gc_tuning``) and collect young objects less
    often (``GC_THRESHOLD``); for the worker's own process only."""
    freeze_startup_objects()
    gc.set_threshold(*GC_THRESHOLD)


def main(settings: Settings, worker_id: str | None = None, *, drain: bool = False) -> None:
    tune_gc()
    code = asyncio.run(_serve(settings, worker_id, drain))
    if code:
        sys.exit(code)
