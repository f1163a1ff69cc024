"""The garbage collector's settings for onlinepredict's long-running processes.

``freeze_startup_objects`` moves what start-up made out of the collector's reach, once per
process (``gc.freeze``): a full collection over it (~95k objects in the API) took ~40 ms
here, a pause every request in flight waited for (it set the predict route's p99). Later
full collections scan only objects made since. Garbage is collected first, so nothing
collectable is kept. The API calls it at start-up, the worker process too
(``service.worker.main.tune_gc``, which also collects young objects less often).
"""

from __future__ import annotations

import gc

_frozen: list[bool] = []


def freeze_startup_objects() -> None:
    """``gc.collect`` then ``gc.freeze``, the first time it is called in this process."""
    if not _frozen:
        _frozen.append(True)
        gc.collect()
        gc.freeze()
