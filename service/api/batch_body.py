"""The binary body of a predict batch (docs/events.md §7, ``clients.wire.encode_predict_batch``).

:func:`decode_predict_batch` reads it as two numpy views and checks everything the JSON
body's validation checks (rows, finite numbers, finite hints, the batch limit); any fault is
an ``InvalidInput`` (422) naming it, never another exception. The model's dimension is
checked by the route against its spec, as for JSON.
"""

from __future__ import annotations

import numpy as np

from clients.wire import PREDICT_HEADER, PREDICT_HINTS, PREDICT_MAGIC, PREDICT_VERSION
from service.api.errors import InvalidInput

_F8 = np.dtype("<f8")
_WHERE = "binary predict batch (docs/events.md §7)"


def _invalid(reason: str) -> InvalidInput:
    return InvalidInput(f"{_WHERE}: {reason}")


def decode_predict_batch(body: bytes, max_batch: int) -> tuple[np.ndarray, list[float | None]]:
    """(X, hints) of a binary batch body: X an n x d float64 matrix (a copy, C-contiguous),
    hints one entry per row, None where the row has none."""
    size = len(body)
    if size < PREDICT_HEADER.size:
        raise _invalid(f"{size} bytes is shorter than the {PREDICT_HEADER.size}-byte header")
    magic, version, flags, reserved, n, d = PREDICT_HEADER.unpack_from(body)
    if magic != PREDICT_MAGIC:
        raise _invalid(f"magic {magic!r} is not {PREDICT_MAGIC!r}")
    if version != PREDICT_VERSION:
        raise _invalid(f"version {version} is not supported (this server reads {PREDICT_VERSION})")
    if flags & ~PREDICT_HINTS or reserved:
        raise _invalid(f"unknown header flags {flags:#04x} (or reserved field {reserved})")
    if n < 1 or d < 1:
        raise _invalid(f"shape {n} x {d}: 'instances' must not be empty, rows need a column")
    if n > max_batch:
        raise InvalidInput(f"instances: at most {max_batch} per request, got {n}")
    hinted = bool(flags & PREDICT_HINTS)
    expected = PREDICT_HEADER.size + 8 * n * d + (8 * n if hinted else 0)
    if size != expected:
        raise _invalid(f"{size} bytes, the header's {n} x {d} layout takes {expected}")
    X = np.frombuffer(body, _F8, n * d, PREDICT_HEADER.size).reshape(n, d)
    if not np.isfinite(X).all():
        row = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise InvalidInput(f"instances[{row}] must contain only finite numbers (no NaN or inf)")
    hints: list[float | None]
    if not hinted:
        hints = [None] * n
    else:
        h = np.frombuffer(body, _F8, n, PREDICT_HEADER.size + 8 * n * d)
        if np.isinf(h).any():
            row = int(np.flatnonzero(np.isinf(h))[0])
            raise InvalidInput(f"hints[{row}] must be finite (NaN means no hint)")
        hints = [None if v != v else v for v in h.tolist()]  # v != v: NaN, no hint
    return X.astype(np.float64), hints  # a copy: aligned, writeable, native byte order
