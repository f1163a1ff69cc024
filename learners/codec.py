"""State codec: ``state()`` dict <-> bytes, without pickle.

Envelope (format version 1)::

    b"OPST" | u16 format | u32 checksum (CRC-32 of everything after it) | u32 header length |
    header (UTF-8 JSON) | array payload

The header maps each field to ``{"t": "f"|"i"|"s", "v": value}`` for scalars or
``{"t": "a", "dtype": "<f8", "shape": [...], "offset": n, "nbytes": n}`` for arrays, whose
raw little-endian bytes follow in the payload. Floats go through ``float.hex`` so they
round-trip bit for bit (NaN and inf included). A truncated or corrupted blob fails the
checksum; an unknown format version fails with a message naming both versions.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import numpy as np

from learners.base import State

MAGIC = b"OPST"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
_PREFIX = struct.Struct("<4sHII")  # magic, format, checksum, header length
_ALLOWED_DTYPES = {"b", "i", "u", "f", "c"}


class StateCodecError(ValueError):
    """A state blob that cannot be decoded (corrupt, truncated, or unknown format)."""


def encode_state(state: State) -> bytes:
    """Serialise a learner state to bytes (format ``FORMAT_VERSION``)."""
    header: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, value in state.items():
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in _ALLOWED_DTYPES:
                raise TypeError(f"state field {name!r}: dtype {value.dtype} is not supported")
            arr = np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<"))
            raw = arr.tobytes()
            header[name] = {
                "t": "a",
                "dtype": arr.dtype.str,
                "shape": list(arr.shape),
                "offset": offset,
                "nbytes": len(raw),
            }
            chunks.append(raw)
            offset += len(raw)
        elif isinstance(value, bool | np.bool_):
            header[name] = {"t": "i", "v": int(value)}
        elif isinstance(value, int | np.integer):
            header[name] = {"t": "i", "v": int(value)}
        elif isinstance(value, float | np.floating):
            header[name] = {"t": "f", "v": float(value).hex()}
        elif isinstance(value, str):
            header[name] = {"t": "s", "v": value}
        else:
            raise TypeError(f"state field {name!r} has unsupported type {type(value).__name__}")
    head = json.dumps(header, separators=(",", ":")).encode()
    body = struct.pack("<I", len(head)) + head + b"".join(chunks)
    checksum = zlib.crc32(struct.pack("<H", FORMAT_VERSION) + body)
    return MAGIC + struct.pack("<HI", FORMAT_VERSION, checksum) + body


def decode_state(blob: bytes) -> State:
    """Parse bytes made by :func:`encode_state`; raises :class:`StateCodecError` if invalid."""
    if len(blob) < _PREFIX.size:
        raise StateCodecError(f"state blob truncated: {len(blob)} bytes")
    magic, version, checksum, head_len = _PREFIX.unpack_from(blob)
    if magic != MAGIC:
        raise StateCodecError("not an onlinepredict state blob (bad magic)")
    if version not in SUPPORTED_VERSIONS:
        raise StateCodecError(
            f"state format version {version} is not supported by this build"
            f" (supported: {', '.join(map(str, SUPPORTED_VERSIONS))}; current {FORMAT_VERSION})"
        )
    if zlib.crc32(blob[4:6] + blob[10:]) != checksum:
        raise StateCodecError("state blob checksum mismatch: corrupt or truncated")
    start = _PREFIX.size
    try:
        header = json.loads(blob[start : start + head_len])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateCodecError(f"state header unreadable: {exc}") from None
    payload = memoryview(blob)[start + head_len :]
    out: State = {}
    for name, spec in header.items():
        t = spec.get("t")
        if t == "a":
            dtype = np.dtype(spec["dtype"])
            if dtype.kind not in _ALLOWED_DTYPES:
                raise StateCodecError(f"field {name!r}: dtype {dtype} not allowed")
            lo, n = int(spec["offset"]), int(spec["nbytes"])
            if lo + n > len(payload):
                raise StateCodecError(f"field {name!r} runs past the end of the blob")
            arr = np.frombuffer(payload[lo : lo + n], dtype=dtype).reshape(spec["shape"])
            out[name] = arr.astype(dtype.newbyteorder("="), copy=True)
        elif t == "i":
            out[name] = int(spec["v"])
        elif t == "f":
            out[name] = float.fromhex(spec["v"])
        elif t == "s":
            out[name] = str(spec["v"])
        else:
            raise StateCodecError(f"field {name!r} has unknown type tag {t!r}")
    return out
