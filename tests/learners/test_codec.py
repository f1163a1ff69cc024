"""The state codec: exact round trip, versioned envelope, corruption detected."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from learners.codec import FORMAT_VERSION, StateCodecError, decode_state, encode_state


def _state() -> dict:  # type: ignore[type-arg]
    rng = np.random.default_rng(1)
    return {
        "kind": "demo",
        "dim": 3,
        "params": '{"C": 1.0}',
        "w_": rng.normal(size=3),
        "P_": rng.normal(size=(2, 3, 3)),
        "mask_": np.array([True, False]),
        "n_": np.arange(4, dtype=np.int64),
        "eps_": 0.1 + 0.2,
        "nan_": float("nan"),
        "inf_": float("-inf"),
        "t_": 12345678901234,
        "name_": "ünïcode",
    }


def test_round_trip_is_bit_exact() -> None:
    s = _state()
    d = decode_state(encode_state(s))
    assert d.keys() == s.keys()
    for k, v in s.items():
        if isinstance(v, np.ndarray):
            assert d[k].dtype == v.dtype and np.array_equal(d[k], v)
            assert d[k].flags.writeable
        elif isinstance(v, float) and v != v:
            assert d[k] != d[k]
        else:
            assert d[k] == v and type(d[k]) is type(v)


def test_unknown_version_names_both_versions() -> None:
    blob = bytearray(encode_state(_state()))
    struct.pack_into("<H", blob, 4, 99)
    with pytest.raises(StateCodecError, match=rf"version 99 .*current {FORMAT_VERSION}"):
        decode_state(bytes(blob))


@pytest.mark.parametrize("cut", [0, 5, 13, 40, -1])
def test_truncated_blob_is_rejected(cut: int) -> None:
    blob = encode_state(_state())
    with pytest.raises(StateCodecError):
        decode_state(blob[:cut])


def test_flipped_byte_is_detected() -> None:
    blob = bytearray(encode_state(_state()))
    for pos in (12, len(blob) // 2, len(blob) - 1):
        bad = bytearray(blob)
        bad[pos] ^= 0x01
        with pytest.raises(StateCodecError, match="checksum"):
            decode_state(bytes(bad))


def test_not_a_blob() -> None:
    with pytest.raises(StateCodecError, match="magic"):
        decode_state(b"\x80\x04garbage-garbage-garbage")


def test_object_arrays_are_refused() -> None:
    with pytest.raises(TypeError):
        encode_state({"x_": np.array([object()])})
