"""Dead letters: invalid events go to ``deadletter_topic`` with the reason.

Sends are buffered and awaited in :meth:`DeadLetters.flush`, which the checkpoint calls
before committing, so a dead letter is never lost (it may be repeated after a crash).
Each letter is also noted under the record's key (the model id) for the model's bounded
list in Redis, which the checkpoint writes (service/worker/refusals.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Awaitable
from typing import Any

from clients.wire import FRAME_MAGIC
from service.worker.events import raw_event_id
from service.worker.ports import Log, Record
from service.worker.refusals import LIST_KEEP, letter_entry

logger = logging.getLogger(__name__)

# A dead letter carries the record's value, escaped as JSON: a record near the broker's
# size limit (or full of control characters, 6 bytes each escaped) would make a letter the
# producer refuses, and the worker would stop on the record it is meant to set aside.
# The letter keeps this much of the value; the record itself stays in the log at its offset.
MAX_VALUE_CHARS = 16_384
MAX_KEY_CHARS = 1_024


def deadletter_value(
    record: Record, reason: str, worker: str, *, row: tuple[int, dict[str, Any]] | None = None
) -> bytes:
    """The letter for ``record``; with ``row`` = (index, event), for one row of a frame:
    that row as a JSON event (docs/events.md §6), to inspect and re-send as it is. A frame
    refused as a whole is carried base64-encoded (``value_base64``)."""
    raw = record.value
    frame = raw is not None and raw[:4] == FRAME_MAGIC
    if row is not None:
        raw = json.dumps(row[1], separators=(",", ":")).encode()  # NaN stays readable
    elif frame:
        assert raw is not None
        raw = base64.b64encode(raw)
    value = raw.decode(errors="replace") if raw is not None else None
    key = record.key.decode(errors="replace") if record.key is not None else None
    body: dict[str, Any] = {
        "reason": reason[:MAX_VALUE_CHARS],
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key": key[:MAX_KEY_CHARS] if key is not None else None,
        "value": value[:MAX_VALUE_CHARS] if value is not None else None,
        "worker": worker,
        "ts": time.time(),
    }
    if row is not None:
        body["frame_row"] = row[0]
    elif frame:
        body["value_base64"], body["value"] = body["value"], None
    if raw is not None and len(value or "") > MAX_VALUE_CHARS:
        body["value_truncated"] = True
        body["value_bytes"] = len(raw)
    return json.dumps(body, separators=(",", ":")).encode()


class DeadLetters:
    def __init__(self, log: Log, topic: str, worker: str) -> None:
        self.log = log
        self.topic = topic
        self.worker = worker
        self.pending: list[Awaitable[Any]] = []
        self.sent = 0
        # record key (a model id) -> its letters since the last checkpoint, oldest first
        self.recent: dict[str, list[bytes]] = {}

    async def send(
        self, record: Record, reason: str, row: tuple[int, dict[str, Any]] | None = None
    ) -> None:
        """Dead-letter ``record`` (or, with ``row``, one row of the frame it carries)."""
        logger.debug(
            "dead letter %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason
        )
        fut = await self.log.produce(
            self.topic, deadletter_value(record, reason, self.worker, row=row), record.key
        )
        self.pending.append(fut)
        if record.key is not None and len(record.key) <= MAX_KEY_CHARS:
            event_id = str(row[1].get("id", "")) if row is not None else raw_event_id(record.value)
            listed = self.recent.setdefault(record.key.decode(errors="replace"), [])
            listed.append(
                letter_entry(
                    reason,
                    event_id,
                    record.topic,
                    record.partition,
                    record.offset,
                    row[0] if row is not None else None,
                )
            )
            if len(listed) > 2 * LIST_KEEP:  # only the newest are kept in Redis anyway
                del listed[:LIST_KEEP]

    def take_recent(self) -> dict[str, list[bytes]]:
        """The letters noted since the last call, per record key; forgets them."""
        out, self.recent = self.recent, {}
        return out

    async def flush(self) -> int:
        """Wait for every buffered dead letter; returns how many were delivered."""
        if not self.pending:
            return 0
        pending, self.pending = self.pending, []
        await asyncio.gather(*pending)
        self.sent += len(pending)
        return len(pending)
