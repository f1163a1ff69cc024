"""``python -m service.worker``: one worker configured from ``ONLINEPREDICT_*``."""

from __future__ import annotations

import os

# First of all: a SIGTERM during the imports below is recorded, not fatal.
from service.worker import early_stop

early_stop.hold()

import logging  # noqa: E402

# Before numpy loads: one BLAS thread. A worker runs many small matrix steps; BLAS threads
# fighting over shared cores made d x d learners 2-12x slower (benchmarks/README.md).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from service.config import Settings  # noqa: E402
from service.worker.main import main  # noqa: E402

if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("ONLINEPREDICT_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    main(Settings(), os.environ.get("ONLINEPREDICT_WORKER_ID") or None)
