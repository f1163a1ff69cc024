"""The per-model dead letters and recent refused share in Redis (docs/design.md, "Dead
letters"): written by the worker with its checkpoints (service/worker/refusals.py), read by
the API (``GET /v1/models/{id}/deadletters``, the model's status, ``/metrics``)."""

from __future__ import annotations

import json
import time
from typing import Any

from service.store.keys import Keys

LIST_KEEP = 1000  # letters kept per model (the route's largest ``limit``)
RECENT = 100  # events the recent refused share spans, at least
REFUSING_MIN_EVENTS = 20  # fewer recent events than this: never "refusing"
REFUSING_SHARE = 0.5  # "refusing most of its recent events"


def letter_entry(
    reason: str,
    event_id: str,
    topic: str,
    partition: int,
    offset: int,
    row: int | None,
    *,
    at: float | None = None,
) -> bytes:
    """One listed letter: what the route answers (without the record's value: the topic
    keeps it, at ``partition``/``offset``)."""
    body: dict[str, Any] = {
        "reason": reason[:2000],
        "event_id": event_id,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "time": time.time() if at is None else at,
    }
    if row is not None:
        body["frame_row"] = row
    return json.dumps(body, separators=(",", ":")).encode()


def refusing(events: int, refused: int) -> bool:
    return events >= REFUSING_MIN_EVENTS and refused / events >= REFUSING_SHARE


async def read_deadletters(redis: Any, keys: Keys, model: str, limit: int) -> list[dict[str, Any]]:
    """The model's newest ``limit`` letters, newest first, each (partition, offset, row)
    once (a replay may have listed a letter twice)."""
    raw = await redis.lrange(keys.deadletters(model), 0, LIST_KEEP - 1)
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for item in raw:
        try:
            d = json.loads(item)
        except ValueError:
            continue
        at = (d.get("topic"), d.get("partition"), d.get("offset"), d.get("frame_row"))
        if at in seen:
            continue
        seen.add(at)
        out.append(d)
        if len(out) >= limit:
            break
    return out


async def read_refused(redis: Any, keys: Keys, models: list[str]) -> dict[str, tuple[int, int]]:
    """Per model with a share written: its recent (events, refused)."""
    async with redis.pipeline(transaction=False) as pipe:
        for m in models:
            pipe.hmget(keys.refused(m), ["events", "refused"])
        rows = await pipe.execute()
    return {
        m: (int(events), int(refused))
        for m, (events, refused) in zip(models, rows, strict=True)
        if events is not None and refused is not None
    }
