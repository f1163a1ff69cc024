"""The parts behind a model's visible refusals (service/worker/refusals.py,
service/store/deadletters.py): the recent refused share over the last 100 or more events,
and the Redis list the API reads, newest first, each letter once after a replay listed it
twice (real Redis)."""

from __future__ import annotations

import asyncio
import uuid

from redis.asyncio import Redis

from service.store.deadletters import letter_entry, read_deadletters, read_refused, refusing
from service.store.keys import Keys
from service.worker.refusals import RecentShares


def test_the_recent_share_spans_the_last_hundred_events_or_more() -> None:
    shares = RecentShares()
    # loaded at (10 applied, 0 rejected); a checkpoint after 30 refused of 40 decided
    got = shares.update([("m", (20, 30), (10, 0))])
    assert got == {"m": (40, 30)} and refusing(*got["m"])
    # 120 clean events later the window drops the old checkpoint: 0 of 120, written once
    # more (so the status reads 0 again), then not written at all
    assert shares.update([("m", (140, 30), (10, 0))]) == {"m": (120, 0)}
    assert shares.update([("m", (150, 30), (10, 0))]) == {}
    # a model that never refused is never written; one reloaded with lower counters restarts
    assert shares.update([("clean", (50, 0), (0, 0))]) == {}
    assert shares.update([("m", (5, 0), (5, 0))]) == {}
    assert not refusing(19, 19) and refusing(20, 10) and not refusing(100, 49)


def test_the_list_reads_newest_first_each_letter_once(redis_url: str) -> None:
    keys = Keys(f"t-{uuid.uuid4().hex[:8]}:")

    async def go() -> None:
        r = Redis.from_url(redis_url)
        try:
            letters = [
                letter_entry(f"why {i}", f"e{i}", "ev", 0, 10 + i, None, at=float(i))
                for i in range(5)
            ]
            row = letter_entry("a row", "f1", "ev", 0, 20, 3, at=9.0)
            # as the worker writes them (LPUSH of each checkpoint's, oldest first), a replay
            # listing e3 and e4 again
            await r.lpush(keys.deadletters("m"), *letters, row, letters[3], letters[4])
            got = await read_deadletters(r, keys, "m", 100)
            assert [d["event_id"] for d in got] == ["e4", "e3", "f1", "e2", "e1", "e0"]
            assert got[2]["frame_row"] == 3 and got[0]["reason"] == "why 4"
            assert [d["event_id"] for d in await read_deadletters(r, keys, "m", 2)] == ["e4", "e3"]
            assert await read_deadletters(r, keys, "nobody", 10) == []
            await r.hset(keys.refused("m"), mapping={"events": 40, "refused": 30, "at": 1.0})
            assert await read_refused(r, keys, ["m", "nobody"]) == {"m": (40, 30)}
        finally:
            await r.delete(keys.deadletters("m"), keys.refused("m"))
            await r.aclose()

    asyncio.run(go())
