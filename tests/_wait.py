"""The one poll-until helper of the tests (sync and async): wait for a condition with a
deadline, never a fixed sleep (docs: the project's standards, "no fixed sleeps")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: first pause between two checks; it doubles up to the caller's ``interval``, so a
#: condition that holds a moment later is seen a moment later, not an interval later
FIRST_PAUSE_S = 0.005


def _no_detail() -> str:
    return ""


def wait_for(
    pred: Callable[[], T],
    timeout: float,
    what: str,
    interval: float = 0.2,
    detail: Callable[[], str] = _no_detail,
) -> T:
    """Check ``pred`` until it returns something true and return that; fail with ``what``
    (and ``detail()``, where things stood) after ``timeout`` seconds. The timeout bounds
    a hang, it is not a timing assertion."""
    deadline = time.monotonic() + timeout
    pause = min(FIRST_PAUSE_S, interval)
    while True:
        got = pred()
        if got:
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail()}")
        time.sleep(min(pause, left))
        pause = min(pause * 2, interval)


async def wait_for_async(
    pred: Callable[[], Awaitable[Any]],
    timeout: float,
    what: str,
    interval: float = 0.2,
    detail: Callable[[], str] = _no_detail,
) -> Any:
    """:func:`wait_for` for an async condition (``await pred()``), yielding to the loop
    between checks."""
    deadline = time.monotonic() + timeout
    pause = min(FIRST_PAUSE_S, interval)
    while True:
        got = await pred()
        if got:
            return got
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail()}")
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, interval)
