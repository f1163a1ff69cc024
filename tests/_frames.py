"""Frames (docs/events.md §6) read back for tests, apart from the worker's decoder: the
reference replays and the log readers see a frame as the JSON events of its rows."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

MAGIC = b"\x93OPF"


def frame_rows(value: bytes) -> list[dict[str, Any]]:
    """A well-formed frame's rows as JSON events, read straight from the layout table."""
    _, _, kind, flags, n, d, ts, m_len, b_len = struct.unpack_from("<4sBBBxIIdII", value)
    model = value[32 : 32 + m_len].decode()
    pos = 32 + m_len + (-m_len % 8)
    incarnation = None
    if flags & 2:  # the incarnation block: u32 length, UTF-8, padding to 8
        (i_len,) = struct.unpack_from("<I", value, pos)
        incarnation = value[pos + 4 : pos + 4 + i_len].decode()
        pos += 4 + i_len + (-(4 + i_len) % 8)
    offsets = struct.unpack_from(f"<{n + 1}I", value, pos)
    at = pos + 4 * (n + 1)
    ids = [value[at + a : at + b].decode() for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
    pos = at + b_len + (-(4 * (n + 1) + b_len) % 8)
    xs = struct.unpack_from(f"<{n * d}d", value, pos)
    pos += 8 * n * d
    ys = struct.unpack_from(f"<{n}d", value, pos)
    pos += 8 * n
    hints = struct.unpack_from(f"<{n}d", value, pos) if flags & 1 else None
    pos += 8 * n if hints is not None else 0
    row_flags = value[pos : pos + n]
    rows = []
    for i in range(n):
        y: Any = None
        if row_flags[i] & 1:
            y = bool(ys[i]) if kind == 1 else ys[i]
        row: dict[str, Any] = {
            "model": model,
            "id": ids[i],
            "x": list(xs[i * d : (i + 1) * d]),
            "y": y,
            "ts": None if math.isnan(ts) else ts,
        }
        if hints is not None and row_flags[i] & 2:
            row["hint"] = hints[i]
        if incarnation is not None:
            row["incarnation"] = incarnation
        rows.append(row)
    return rows


def record_events(value: bytes) -> list[dict[str, Any]]:
    """The events a record value carries: a frame's rows, or its one JSON event."""
    return frame_rows(value) if value[:4] == MAGIC else [json.loads(value)]
