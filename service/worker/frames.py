"""Binary frames (docs/events.md §6): many examples of one model in one record.

:func:`decode_frame` reads the layout of ``clients.wire.encode_frame`` as a handful of
numpy views (no per-row Python work) and checks it in two tiers:

- the structure (magic, version, lengths, offsets, ids, flags, model = key): a frame that
  fails it raises :class:`InvalidEvent` and is one rejected record;
- the values, per row and vectorised (finite, within ``MAX_ABS_VALUE``, a boolean frame's
  labels 0/1): a bad row gets its own reason in :attr:`Frame.bad` and is rejected alone, the
  other rows are learned (the same words as the JSON decoder's).
"""

from __future__ import annotations

import base64
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clients import wire
from clients.wire import (
    FLAG_HINTS,
    FLAG_INCARNATION,
    FRAME_HEADER,
    FRAME_MAGIC,
    FRAME_VERSION,
    INCARNATION_LEN,
    LABEL_BOOL,
    LABEL_NUMBER,
    MAX_FRAME_ROWS,
    MAX_ID_LEN,
    MAX_INCARNATION_LEN,
    ROW_HINT,
    ROW_LABELLED,
    pad8,
)
from service.limits import MAX_ABS_VALUE
from service.worker.invalid import InvalidEvent

_BOUND = f'within ±{MAX_ABS_VALUE:g} (docs/events.md, "Values")'
_F8 = np.dtype("<f8")
_U4 = np.dtype("<u4")
_ROW_BITS = ROW_LABELLED | ROW_HINT
_FLAGS = FLAG_HINTS | FLAG_INCARNATION


@dataclass(slots=True, eq=False)
class Frame:
    """A decoded frame: ``ids[i]``, ``X[i]``, ``y[i]`` (meaningful where ``labelled[i]``),
    ``hints[i]`` (where ``has_hint[i]``) are row i. ``bad`` maps a row to why it is refused."""

    model: str
    ids: list[str]
    X: np.ndarray  # n x d float64, C-contiguous, writeable (a copy of the record's block)
    y: np.ndarray
    labelled: np.ndarray  # bool
    hints: np.ndarray | None
    has_hint: np.ndarray | None  # bool
    label_kind: int
    ts: float | None
    bad: dict[int, str] = field(default_factory=dict)
    type: str = "frame"
    incarnation: str | None = None  # the model's, when the producer gave it (flags bit 1)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def id(self) -> str:
        """The id a stamp at this record records: its last row's (``frame_event_id``)."""
        return self.ids[-1]

    def labels(self) -> list[Any]:
        """Row labels as the JSON decoder gives them: floats (booleans for a boolean
        frame), None where unlabelled."""
        bools = self.label_kind == LABEL_BOOL
        ys: list[Any] = (self.y != 0.0).tolist() if bools else self.y.tolist()
        if not self.labelled.all():
            for i in np.flatnonzero(~self.labelled).tolist():
                ys[i] = None
        return ys

    def hint_list(self) -> list[float | None] | None:
        if self.hints is None or self.has_hint is None:
            return None
        hs: list[float | None] = self.hints.tolist()
        if not self.has_hint.all():
            for i in np.flatnonzero(~self.has_hint).tolist():
                hs[i] = None
        return hs

    def row_event(self, i: int) -> dict[str, Any]:
        """Row ``i`` as a JSON event (docs/events.md §1): what its dead letter carries, to
        inspect and re-send."""
        y: Any = None
        if self.labelled[i]:
            y = bool(self.y[i]) if self.label_kind == LABEL_BOOL else float(self.y[i])
        hint = None  # row i's alone: a frame refused whole dead-letters every row
        if self.hints is not None and self.has_hint is not None and self.has_hint[i]:
            hint = float(self.hints[i])
        event = wire.example(
            self.model,
            self.ids[i],
            self.X[i].tolist(),
            y,
            ts=0.0,
            hint=hint,
            incarnation=self.incarnation,
        )
        event[wire.TS] = self.ts  # None stays None (wire.example would stamp "now")
        return event


def _structure(reason: str, model: str | None = None) -> InvalidEvent:
    return InvalidEvent(f"invalid frame: {reason}", model)


def decode_frame(key: bytes | None, value: bytes) -> Frame:
    """Parse and check one frame record; raises :class:`InvalidEvent`, and nothing else."""
    try:
        return _decode(key, value)
    except InvalidEvent:
        raise
    except Exception as exc:  # a gap in the checks must never stop the worker
        raise _structure(f"{type(exc).__name__}: {exc}"[:300]) from None


def _decode(key: bytes | None, value: bytes) -> Frame:
    size = len(value)
    if size < FRAME_HEADER.size:
        raise _structure(f"{size} bytes is shorter than the {FRAME_HEADER.size}-byte header")
    magic, version, kind, flags, reserved, n, d, ts, m_len, b_len = FRAME_HEADER.unpack_from(value)
    if magic != FRAME_MAGIC:
        raise _structure(f"magic {magic!r} is not {FRAME_MAGIC!r}")
    if version != FRAME_VERSION:
        raise _structure(f"version {version} is not supported (this worker reads {FRAME_VERSION})")
    pos = FRAME_HEADER.size
    model_b = value[pos : pos + m_len]
    try:
        model = model_b.decode()
    except UnicodeDecodeError:
        raise _structure("the model id is not UTF-8") from None
    if not model or len(model_b) != m_len:
        raise _structure("the model id is empty or cut short")
    if key is None or key != model_b:
        shown = key.decode(errors="replace") if key is not None else None
        raise InvalidEvent(
            f"record key {shown!r} must be the model id {model!r} (one partition per model)",
            model,
        )
    if kind not in (LABEL_NUMBER, LABEL_BOOL):
        raise _structure(f"label kind {kind} is not 0 (numbers) or 1 (booleans)", model)
    if flags & ~_FLAGS or reserved:
        raise _structure(f"unknown header flags {flags:#04x} (or reserved byte {reserved})", model)
    if not 1 <= n <= MAX_FRAME_ROWS or d < 1:
        raise _structure(f"shape {n} x {d}: rows must be 1-{MAX_FRAME_ROWS}, columns >= 1", model)
    pos += m_len + pad8(m_len)
    incarnation = None
    if flags & FLAG_INCARNATION:
        incarnation, pos = _incarnation(value, pos, model)
    ids_at = pos
    ids_len = 4 * (n + 1) + b_len
    pos += ids_len + pad8(ids_len)
    hints_on = bool(flags & FLAG_HINTS)
    expected = pos + 8 * n * d + 8 * n + (8 * n if hints_on else 0) + n
    if size != expected:
        raise _structure(f"{size} bytes, the header's {n} x {d} layout takes {expected}", model)
    ids = _ids(value, ids_at, n, b_len, model)
    X = np.frombuffer(value, _F8, n * d, pos).reshape(n, d)
    pos += 8 * n * d
    y = np.frombuffer(value, _F8, n, pos)
    pos += 8 * n
    hints = None
    if hints_on:
        hints = np.frombuffer(value, _F8, n, pos)
        pos += 8 * n
    row_flags = np.frombuffer(value, np.uint8, n, pos)
    if (row_flags & np.uint8(0xFF ^ _ROW_BITS)).any():
        raise _structure("row flags use bits other than 0 (labelled) and 1 (hint)", model)
    labelled = (row_flags & ROW_LABELLED).astype(bool)
    has_hint = (row_flags & ROW_HINT).astype(bool) if hints_on else None
    if not hints_on and (row_flags & ROW_HINT).any():
        raise _structure("a row flags a hint but the frame has no hints block", model)
    if math.isinf(ts):
        raise _structure("'ts' must be finite (or NaN for none)", model)
    frame = Frame(
        model=model,
        ids=ids,
        X=X.copy(),  # learners may keep rows: never a view of the record's bytes
        y=y,
        labelled=labelled,
        hints=hints,
        has_hint=has_hint,
        label_kind=kind,
        ts=None if math.isnan(ts) else ts,
        incarnation=incarnation,
    )
    frame.bad = _bad_rows(frame)
    return frame


def _incarnation(value: bytes, at: int, model: str) -> tuple[str, int]:
    """The optional incarnation block at ``at``: u32 length, UTF-8 bytes, padding to 8;
    returns it and the position after it."""
    if at + INCARNATION_LEN.size > len(value):
        raise _structure("the incarnation block is cut short", model)
    (length,) = INCARNATION_LEN.unpack_from(value, at)
    if not 1 <= length <= MAX_INCARNATION_LEN or at + 4 + length > len(value):
        raise _structure(f"the incarnation must be 1-{MAX_INCARNATION_LEN} bytes", model)
    try:
        text = value[at + 4 : at + 4 + length].decode()
    except UnicodeDecodeError:
        raise _structure("the incarnation is not UTF-8", model) from None
    return text, at + 4 + length + pad8(4 + length)


def _ids(value: bytes, at: int, n: int, b_len: int, model: str) -> list[str]:
    """The ids block: n + 1 u32 offsets into UTF-8 bytes; each id 1-256 characters."""
    offsets = np.frombuffer(value, _U4, n + 1, at)
    if offsets[0] != 0 or offsets[-1] != b_len:
        raise _structure(f"id offsets must run from 0 to {b_len}", model)
    lengths = np.diff(offsets.astype(np.int64))
    if (lengths <= 0).any() or (lengths > 4 * MAX_ID_LEN).any():
        raise _structure(f"every id must be 1-{MAX_ID_LEN} characters", model)
    start = at + 4 * (n + 1)
    blob = value[start : start + b_len]
    try:
        text = blob.decode()
    except UnicodeDecodeError:
        raise _structure("ids are not UTF-8 (or hold a lone surrogate)", model) from None
    width = int(lengths[0])
    if text.isascii() and b"\0" not in blob and (lengths == width).all():
        # ids of one width (uuids, numbered ids): one fixed-width array, no slicing
        # (no NUL: numpy's bytes type would drop trailing ones)
        ids = list(map(bytes.decode, np.frombuffer(blob, f"S{width}").tolist()))
    elif text.isascii():  # one byte per character: slice the decoded text
        bounds = offsets.tolist()
        ids = list(map(text.__getitem__, map(slice, bounds[:-1], bounds[1:])))
    else:
        bounds = offsets.tolist()
        raw = np.frombuffer(blob, np.uint8)
        if ((raw[offsets[:-1]] & 0xC0) == 0x80).any():
            raise _structure("an id offset splits a UTF-8 character", model)
        ids = list(map(bytes.decode, map(blob.__getitem__, map(slice, bounds[:-1], bounds[1:]))))
    if max(map(len, ids)) > MAX_ID_LEN:
        raise _structure(f"every id must be 1-{MAX_ID_LEN} characters", model)
    return ids


def _bad_rows(f: Frame) -> dict[int, str]:
    """Rows whose values the JSON decoder would refuse, with its words: one vectorised
    pass per block, a Python look only at the rows that fail."""
    bad: dict[int, str] = {}
    ok_x = (np.abs(f.X) <= MAX_ABS_VALUE).all(axis=1)
    if not ok_x.all():
        for i in np.flatnonzero(~ok_x).tolist():
            finite = bool(np.isfinite(f.X[i]).all())
            bad[i] = (
                f"'x' values must be {_BOUND}"
                if finite
                else "'x' must contain only finite numbers (no NaN or inf)"
            )
    if f.label_kind == LABEL_BOOL:
        ok_y = ~f.labelled | (f.y == 0.0) | (f.y == 1.0)
        reason_y = "'y' of a boolean frame must be 0 or 1"
    else:
        ok_y = ~f.labelled | (np.abs(f.y) <= MAX_ABS_VALUE)
        reason_y = f"'y' must be a finite number {_BOUND}"
    if not ok_y.all():
        for i in np.flatnonzero(~ok_y).tolist():
            bad.setdefault(i, reason_y)
    if f.hints is not None and f.has_hint is not None:
        ok_h = ~f.has_hint | (np.abs(f.hints) <= MAX_ABS_VALUE)
        if not ok_h.all():
            for i in np.flatnonzero(~ok_h).tolist():
                bad.setdefault(i, f"'hint' must be a finite number {_BOUND}")
    return bad


def frame_event_id(value: bytes) -> str:
    """The id a stamp records for a frame record: its last row's id ("" when the frame
    cannot be read that far), read without decoding the rest."""
    try:
        magic, version, _, flags, _, n, _, _, m_len, b_len = FRAME_HEADER.unpack_from(value)
        if magic != FRAME_MAGIC or version != FRAME_VERSION or n < 1:
            return ""
        at = FRAME_HEADER.size + m_len + pad8(m_len)
        if flags & FLAG_INCARNATION:
            (length,) = INCARNATION_LEN.unpack_from(value, at)
            at += 4 + length + pad8(4 + length)
        offsets = np.frombuffer(value, _U4, n + 1, at)
        start = at + 4 * (n + 1)
        a, b = int(offsets[-2]), int(offsets[-1])
        if not 0 <= a < b <= b_len or start + b > len(value):
            return ""
        return value[start + a : start + b].decode()
    except (ValueError, IndexError, TypeError, struct.error):  # UnicodeDecodeError too
        return ""


def frame_letter_value(value: bytes) -> dict[str, Any]:
    """How a dead letter carries a frame it could not split into rows: base64."""
    return {"value": None, "value_base64": base64.b64encode(value).decode()}
