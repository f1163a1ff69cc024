"""BLAKE2b with an 8-byte digest, compiled (numba), for many ids in one call: the digests
``hashlib.blake2b(id, digest_size=8)`` gives, 0.26 us per id instead of ~0.9 (the
hashlib call, one per id, was a quarter of a frame's apply at d = 100, cProfile).

Only :mod:`service.store.seen` imports this module, and only while the learners' compiled
path is on (``learners._accel.enabled``: numba installed, ``ONLINEPREDICT_KERNELS`` not 0;
docs/design.md "Compiled kernels"). The algorithm is RFC 7693 (unkeyed, digest length 8:
parameter word 0x01010008); the tests compare it with hashlib on every length up to three
blocks and on multi-byte UTF-8.
"""

from __future__ import annotations

import numpy as np
from numba import njit

jit = njit(cache=True, nogil=True)

_IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    dtype=np.uint64,
)
_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ],
    dtype=np.int64,
)
_SIGMA = np.vstack([_SIGMA, _SIGMA[:2]])  # rounds 10 and 11 reuse permutations 0 and 1
_R32, _R24, _R16, _R63 = np.uint64(32), np.uint64(24), np.uint64(16), np.uint64(63)
_L32, _L40, _L48, _L1 = np.uint64(32), np.uint64(40), np.uint64(48), np.uint64(1)
#: the parameter block's first word: digest length 8, no key, fanout 1, depth 1
_PARAM = np.uint64(0x01010008)


@jit
def _half(a, b, c, d, x, rd, ld, rb, lb):  # type: ignore[no-untyped-def]
    """Half of G: add a message word, rotate d right by ``rd`` and b by ``rb``."""
    a = a + b + x
    d ^= a
    d = (d >> rd) | (d << ld)
    c = c + d
    b ^= c
    b = (b >> rb) | (b << lb)
    return a, b, c, d


@jit
def _g(a, b, c, d, x, y):  # type: ignore[no-untyped-def]
    """RFC 7693 G: mix two message words into four state words (u64, wrapping)."""
    a, b, c, d = _half(a, b, c, d, x, _R32, _L32, _R24, _L40)
    return _half(a, b, c, d, y, _R16, _L48, _R63, _L1)


@jit
def _compress(h, m, t, last):  # type: ignore[no-untyped-def]
    """RFC 7693 F: compress the 16 words ``m`` into ``h``; ``t`` bytes so far."""
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11, v12, v13, v14, v15 = (
        _IV[0],
        _IV[1],
        _IV[2],
        _IV[3],
        _IV[4],
        _IV[5],
        _IV[6],
        _IV[7],
    )
    v12 ^= t
    if last:
        v14 = ~v14
    for r in range(12):
        s = _SIGMA[r]
        # columns, then diagonals
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m[s[0]], m[s[1]])
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m[s[2]], m[s[3]])
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m[s[4]], m[s[5]])
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m[s[6]], m[s[7]])
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m[s[8]], m[s[9]])
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m[s[10]], m[s[11]])
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, m[s[12]], m[s[13]])
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, m[s[14]], m[s[15]])
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@jit
def digest_blob(blob, offsets, out):  # type: ignore[no-untyped-def]
    """``out[i]``: the 8-byte BLAKE2b digest of ``blob[offsets[i]:offsets[i + 1]]`` read as a
    little-endian u64 (as ``np.frombuffer(digest, "<u8")`` on this little-endian host)."""
    h = np.empty(8, np.uint64)
    buf = np.zeros(128, np.uint8)
    m = buf.view(np.uint64)
    for i in range(offsets.shape[0] - 1):
        start, end = offsets[i], offsets[i + 1]
        for k in range(8):
            h[k] = _IV[k]
        h[0] ^= _PARAM
        pos = start
        while True:  # 128-byte blocks, the last zero-padded (one empty block for b"")
            n = min(end - pos, 128)
            for k in range(n):
                buf[k] = blob[pos + k]
            for k in range(n, 128):
                buf[k] = 0
            pos += n
            last = pos >= end
            _compress(h, m, np.uint64(pos - start), last)
            if last:
                break
        out[i] = h[0]
