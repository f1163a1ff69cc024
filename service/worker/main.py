"""``onlinepredict worker``: run one worker until SIGTERM/SIGINT, then stop gracefully."""

from __future__ import annotations

import asyncio
import logging
import signal

from service.config import Settings
from service.worker.loop import run_worker

logger = logging.getLogger(__name__)


async def _serve(settings: Settings, worker_id: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await run_worker(settings, stop=stop, worker_id=worker_id)


def main(settings: Settings, worker_id: str | None = None) -> None:
    asyncio.run(_serve(settings, worker_id))
