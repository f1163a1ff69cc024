"""Event decoding and validation (docs/design.md, "Events").

The wire format (``docs/events.md``) is written once, in ``clients/wire.py``: producers
build and encode records there, and this decoder reads its field and type names, so the two
sides cannot drift (``tests/test_wire.py`` round-trips every shape). The record key is the
model id; the value is an example ``{"model", "id", "x", "y", "ts"?, "hint"?}`` (``x`` a
list, or an object of named numbers that the model's runtime maps by its spec) or a control
event (``type`` ``register``, ``rollback`` or ``created``). Anything else raises
:class:`InvalidEvent` whose ``reason`` goes to the dead-letter topic. Checks that need the
model (dimension, label type) are the learner's, at ``learn`` time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, TypeGuard

import orjson

from clients.wire import (
    CONTROL_TYPES,
    CREATED,
    DISCARD_AFTER,
    FRAME_MAGIC,
    HINT,
    ID,
    INCARNATION,
    MAX_ID_LEN,
    MAX_INCARNATION_LEN,
    MAX_SKIP_IDS,
    MODEL,
    REGISTER,
    ROLLBACK,
    SKIP_IDS,
    STAMP,
    TS,
    TYPE,
    VECTORS,
    VERSION,
    X,
    Y,
)
from service.limits import MAX_ABS_VALUE
from service.worker.frames import frame_event_id
from service.worker.invalid import InvalidEvent

_BOUND = f'within ±{MAX_ABS_VALUE:g} (docs/events.md, "Values")'


@dataclass(slots=True)  # not frozen: a frozen dataclass costs ~1 us more per event
class Event:
    model: str
    id: str
    x: list[float] | dict[str, float]  # a dict: named x, mapped by ModelRuntime
    y: Any
    ts: float | None = None
    hint: float | None = None
    type: str = "example"  # or a control type of clients.wire (docs/events.md §3-5)
    vectors: list[list[float]] | None = None
    version: int | None = None  # rollback: the checkpoint version to restore
    # rollback options (docs/events.md §4): never learn the events after the version's stamp
    # up to the rollback; ids never to learn; the version's stamp the API found
    discard_after: bool = False
    skip_ids: tuple[str, ...] = ()
    stamp: tuple[int, int, str] | None = None
    # the model's incarnation the producer saw (docs/events.md §1); None: not given (an
    # external producer), learned by whichever incarnation the worker holds
    incarnation: str | None = None


_isfinite = math.isfinite
_NUMBER_TYPES = frozenset((int, float))  # what JSON numbers decode to (bool excluded)
_LABEL_TYPES = frozenset((int, float, bool))


def _rollback_options(
    obj: dict[str, Any], model: str | None
) -> tuple[bool, tuple[str, ...], tuple[int, int, str] | None]:
    """A rollback's ``discard_after``, ``skip_ids`` and ``stamp`` (all optional, §4)."""
    discard = obj.get(DISCARD_AFTER, False)
    if type(discard) is not bool:
        raise InvalidEvent(f"'{DISCARD_AFTER}' must be true or false, got {discard!r}", model)
    skip = obj.get(SKIP_IDS, [])
    if not (
        type(skip) is list
        and len(skip) <= MAX_SKIP_IDS
        and all(type(i) is str and 0 < len(i) <= MAX_ID_LEN and _utf8(i) for i in skip)
    ):
        raise InvalidEvent(
            f"'{SKIP_IDS}' must be a list of at most {MAX_SKIP_IDS} event ids", model
        )
    raw = obj.get(STAMP)
    stamp = None
    if raw is not None:
        p, o, e = (
            (raw.get(k) for k in ("partition", "offset", "event_id"))
            if type(raw) is dict
            else (None, None, None)
        )
        if not (type(p) is int and p >= 0 and type(o) is int and o >= -1 and type(e) is str):
            raise InvalidEvent(
                f"'{STAMP}' must be {{partition, offset, event_id}}, got {raw!r}", model
            )
        stamp = (p, o, e)
    return discard, tuple(skip), stamp


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _numbers(v: Any) -> TypeGuard[list[float]]:
    """``v`` is a non-empty list of JSON numbers (one C-level pass over the types)."""
    return type(v) is list and bool(v) and _NUMBER_TYPES.issuperset(map(type, v))


def _all_finite(v: list[float]) -> bool:
    # a finite sum proves every term finite; an overflowing sum takes the exact check
    return math.isfinite(sum(v)) or all(map(math.isfinite, v))


def _bounded(v: list[float]) -> bool:
    """Every (finite) value within ``MAX_ABS_VALUE``: a finite sum does not bound its
    terms (1e300 - 1e300), the extremes do (two C-level passes)."""
    return max(v) <= MAX_ABS_VALUE and min(v) >= -MAX_ABS_VALUE


_HYPOT_BOUND = MAX_ABS_VALUE / 2  # a margin for hypot's rounding: the exact checks decide


def _surely_bounded(v: list[float]) -> bool:
    """True proves every value finite and within ``MAX_ABS_VALUE``: ``hypot`` is at least
    the largest magnitude, inf with an inf, NaN with a NaN (never <=). False proves nothing:
    ``_all_finite`` and ``_bounded`` decide, and word the reason."""
    try:
        return math.hypot(*v) <= _HYPOT_BOUND
    except OverflowError:  # an int beyond the float range
        return False


def _bounded_label(y: Any) -> bool:
    return y is None or type(y) is bool or -MAX_ABS_VALUE <= y <= MAX_ABS_VALUE


def _utf8(text: str) -> bool:
    """``text`` encodes as UTF-8. ``json`` (the fallback reader) turns an escaped lone
    surrogate (``"\\ud800"``) into a str that cannot be hashed, stored in Redis or
    produced: as an event id it raised from ``id_hash`` after the model had learned."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _loads(value: bytes) -> Any:
    """orjson (~9x faster than ``json``); what it refuses goes through ``json``, which reads
    NaN/Infinity and huge numbers too, so those get the precise "finite" reason."""
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return json.loads(value)


def _optional_number(obj: dict[str, Any], name: str, model: str) -> float | None:
    v = obj.get(name)
    if v is None:
        return None
    if not _is_number(v) or not math.isfinite(v):
        raise InvalidEvent(f"'{name}' must be a finite number or null, got {v!r}", model)
    if name == HINT and not _bounded_label(v):
        raise InvalidEvent(f"'hint' must be {_BOUND}", model)
    return float(v)


_loads_fast = orjson.loads


def decode_event(key: bytes | None, value: bytes | None) -> Event:
    """Parse and validate one record; raises :class:`InvalidEvent`, and nothing else.

    Hostile JSON (nesting deep enough to exhaust the recursion limit, integers beyond the
    4300-digit conversion limit or the float range) becomes an ``InvalidEvent`` too, so
    one poison record can never stop a worker.

    The usual example (a list ``x`` of finite numbers proved bounded by one ``hypot``, a
    float or integer label, a float ``ts`` or none, no hint, no type) is read inline, in
    one call; anything else (an error, a control event, named x, a hint, a value to check
    closer) goes through the whole decoder (``decode_event_full``), which words the reason
    (``tests/service/test_worker_units.py`` pins the two paths' equality).
    """
    try:
        obj = _loads_fast(value)  # type: ignore[arg-type]  # None: the whole decoder says so
        model = obj[MODEL]
        event_id = obj[ID]
        x = obj[X]
        y = obj[Y]
        ts = obj.get(TS)
        inc = obj.get(INCARNATION)
        if (
            type(model) is str
            and key == model.encode()
            and model
            and type(event_id) is str
            and 0 < len(event_id) <= MAX_ID_LEN
            and event_id.isascii()
            and type(x) is list
            and x
            and _NUMBER_TYPES.issuperset(map(type, x))
            and math.hypot(*x) <= _HYPOT_BOUND
            and (type(y) is float or type(y) is int)
            and -MAX_ABS_VALUE <= y <= MAX_ABS_VALUE
            and (ts is None or (type(ts) is float and _isfinite(ts)))
            and obj.get(HINT) is None
            and obj.get(TYPE) is None
            and (inc is None or (type(inc) is str and 0 < len(inc) <= MAX_INCARNATION_LEN))
        ):
            return Event(model, event_id, x, y, ts, None, incarnation=inc)
    except Exception:  # noqa: S110  # whatever it is, the whole decoder decides and says why
        pass
    return decode_event_full(key, value)


def decode_event_full(key: bytes | None, value: bytes | None) -> Event:
    """``decode_event`` without its inline path: every check, each with its reason."""
    try:
        return _decode_event(key, value)
    except InvalidEvent:
        raise
    except (RecursionError, OverflowError, ValueError, TypeError) as exc:
        raise InvalidEvent(f"malformed event: {type(exc).__name__}: {exc}"[:500]) from None


def _decode_event(key: bytes | None, value: bytes | None) -> Event:
    if value is None:
        raise InvalidEvent("record has no value")
    try:
        obj = _loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidEvent(f"value is not valid JSON: {exc}") from None
    if type(obj) is not dict:
        raise InvalidEvent(f"event must be a JSON object, got {type(obj).__name__}")
    model = obj.get(MODEL)
    if not isinstance(model, str) or not model:
        raise InvalidEvent("'model' must be a non-empty string")
    if key is None or key != model.encode():  # clients.wire.encode_key, inlined (hot path)
        shown = key.decode(errors="replace") if key is not None else None
        raise InvalidEvent(
            f"record key {shown!r} must be the model id {model!r} (one partition per model)",
            model,
        )
    event_id = obj.get(ID)
    if not isinstance(event_id, str) or not event_id or len(event_id) > MAX_ID_LEN:
        raise InvalidEvent(f"'id' must be a non-empty string of at most {MAX_ID_LEN} chars", model)
    if not event_id.isascii() and not _utf8(event_id):  # isascii: O(1), the fast path
        raise InvalidEvent("'id' must be valid Unicode text (no lone surrogate)", model)
    incarnation = obj.get(INCARNATION)
    if incarnation is not None and not (
        type(incarnation) is str
        and 0 < len(incarnation) <= MAX_INCARNATION_LEN
        and _utf8(incarnation)
    ):
        raise InvalidEvent(
            f"'incarnation' must be a string of 1-{MAX_INCARNATION_LEN} chars or absent", model
        )
    kind = obj.get(TYPE)
    if kind == ROLLBACK:
        version = obj.get(VERSION)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise InvalidEvent(f"'version' must be an integer >= 1, got {version!r}", model)
        ts = _optional_number(obj, TS, model)
        discard, skip, stamp = _rollback_options(obj, model)
        return Event(
            model,
            event_id,
            [],
            None,
            ts=ts,
            type=ROLLBACK,
            version=version,
            incarnation=incarnation,
            discard_after=discard,
            skip_ids=skip,
            stamp=stamp,
        )
    if kind == CREATED:  # a model's creation marker (docs/design.md, "Events")
        return Event(model, event_id, [], None, type=CREATED)
    if kind is not None:
        if kind != REGISTER:
            raise InvalidEvent(
                f"unknown event type {kind!r} (known: {', '.join(map(repr, CONTROL_TYPES))})",
                model,
            )
        return Event(
            model=model,
            id=event_id,
            x=[],
            y=None,
            ts=_optional_number(obj, TS, model),
            type=REGISTER,
            vectors=_vectors(obj.get(VECTORS), model),
            incarnation=incarnation,
        )
    x = obj.get(X)
    if _numbers(x):
        if not _surely_bounded(x):  # the usual event is proved fine in one C call
            if not _all_finite(x):
                raise InvalidEvent("'x' must contain only finite numbers (no NaN or inf)", model)
            if not _bounded(x):
                raise InvalidEvent(f"'x' values must be {_BOUND}", model)
    elif type(x) is dict:  # named x: the model's runtime maps it to the vector
        _check_named(x, model)
    else:
        raise InvalidEvent(
            "'x' must be a non-empty list of numbers, or an object {name: number}", model
        )
    y = obj.get(Y)
    if y is not None and type(y) not in _LABEL_TYPES:
        raise InvalidEvent(f"'y' must be a number, a boolean or null, got {y!r}", model)
    if not _bounded_label(y):
        raise InvalidEvent(f"'y' must be {_BOUND}", model)
    # the hot path: plain lookups first, the checking call only for fields that are there
    ts = obj.get(TS)
    hint = obj.get(HINT)
    return Event(
        model,
        event_id,
        x,
        y,
        ts if type(ts) is float and _isfinite(ts) else _optional_number(obj, TS, model),
        None if hint is None else _optional_number(obj, HINT, model),
        incarnation=incarnation,
    )


def _check_named(x: dict[str, Any], model: str) -> None:
    """An object ``x`` (docs/events.md §1): the same checks on its values as on a list's;
    which names the model has is the runtime's check (it holds the spec)."""
    values = list(x.values())
    if not _NUMBER_TYPES.issuperset(map(type, values)):
        raise InvalidEvent("'x' as an object must map names to numbers", model)
    if not _all_finite(values):
        raise InvalidEvent("'x' must contain only finite numbers (no NaN or inf)", model)
    if values and not _bounded(values):
        raise InvalidEvent(f"'x' values must be {_BOUND}", model)


def _vectors(v: Any, model: str) -> list[list[float]]:
    if not (type(v) is list and v and all(map(_numbers, v))):
        raise InvalidEvent("'vectors' must be a non-empty list of non-empty number lists", model)
    if not all(map(_all_finite, v)):
        raise InvalidEvent("'vectors' must contain only finite numbers", model)
    if not all(map(_bounded, v)):
        raise InvalidEvent(f"'vectors' values must be {_BOUND}", model)
    return v  # type: ignore[no-any-return]


def raw_event_id(value: bytes | None) -> str:
    """The ``id`` string of a record value, valid or not ("" when it has none): the
    event id a stamp records, and what the void-stamp check compares it with. A frame's
    is its last row's id (docs/events.md §6)."""
    if value is not None and value[:4] == FRAME_MAGIC:
        return frame_event_id(value)
    try:
        obj = _loads(value) if value is not None else None
    except (ValueError, RecursionError, OverflowError):  # JSON and Unicode errors too
        return ""
    event_id = obj.get(ID) if isinstance(obj, dict) else None
    if not isinstance(event_id, str) or not (event_id.isascii() or _utf8(event_id)):
        return ""  # a stamp's event id is stored in Redis: it must encode
    return event_id
