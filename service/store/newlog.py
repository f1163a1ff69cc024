"""Move every model onto a new, empty log (docs/reliability.md, "Stopping the embedded stack").

``onlinepredict up`` starts its own broker when none answers, and that broker keeps its log
in memory: each start is a new log whose offsets begin again at 0. The stamps in Redis
point into the old log, so to a worker they look void, and since none of a model's known
points is in the new log either, the divergence search would stop the model for good.
Nothing in the new log has been learned (no worker ran on it yet), so ``up`` tells the store
so before it starts any worker: :func:`rebase_on_new_log` keeps each model's state, counters
and dedupe window, and moves

- its stamp to offset -1 of the same partition (before the log's first record: the worker
  reads the partition from its start and never probes the old offset),
- its origin (the creation marker, in the spec) likewise,
- and drops its kept checkpoints (``history``): their stamps and the rollbacks to them
  belong to the old log.

The state write bumps ``version`` and ``token`` in one script, so a writer left over from
the old log (it cannot be: the broker was just started, but the check is free) loses its
version check instead of writing an old-log stamp back.
"""

from __future__ import annotations

import time

from service.store import registry
from service.store.checkpoints import new_token
from service.store.connect import RedisClient
from service.store.keys import Keys

BEFORE_START = -1  # the stamp offset of "nothing of this log learned yet"

_REBASE_LUA = """
redis.call('DEL', KEYS[2])
if redis.call('HEXISTS', KEYS[1], 'partition') == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'offset', ARGV[1], 'event_id', '', 'barrier', '',
  'token', ARGV[2], 'updated_at', ARGV[3])
redis.call('HDEL', KEYS[1], 'halted')
return 1
"""


async def rebase_on_new_log(redis: RedisClient, keys: Keys) -> list[str]:
    """Move every registered model's stamp and origin before the start of its partition
    of a new, empty log; returns the models that had a stamp. Only for a log no worker has
    read yet."""
    script = redis.register_script(_REBASE_LUA)
    ids = await registry.list_model_ids(redis, keys)
    specs = await registry.get_specs(redis, keys, ids)
    moved: list[str] = []
    for model in ids:
        if await script(
            keys=[keys.state(model), keys.history(model)],
            args=[BEFORE_START, new_token(), time.time()],
        ):
            moved.append(model)
        origin = specs.get(model, {}).get("origin")
        if isinstance(origin, dict) and origin.get("offset") != BEFORE_START:
            spec = {**specs[model], "origin": {**origin, "offset": BEFORE_START}}
            await registry.replace_spec(redis, keys, spec)
    return moved
