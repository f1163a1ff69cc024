"""``python -m service.worker``: one worker configured from ``ONLINEPREDICT_*``."""

from __future__ import annotations

import logging
import os

from service.config import Settings
from service.worker.main import main

if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("ONLINEPREDICT_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    main(Settings(), os.environ.get("ONLINEPREDICT_WORKER_ID") or None)
