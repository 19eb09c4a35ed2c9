"""Slow, obviously-correct twins of the numba kernels; one section per module."""

from __future__ import annotations

import mmh3
import numpy as np
from numpy.typing import NDArray

# =============================================================================================
# kvcompass.keys — MurmurHash3 x64-128 prefix keys
# =============================================================================================
from kvcompass.keys import HASH_SEED, KEY_MASK, KeyNamespace


def keys_at_bytes(
    namespace: KeyNamespace, tokens: NDArray[np.int32], lengths: NDArray[np.int64]
) -> list[int]:
    """Reference: re-hash the whole byte string of every prefix with ``mmh3.hash128``."""
    header = namespace.header_bytes()
    raw = np.asarray(tokens, dtype="<i4").tobytes()
    return [
        int(mmh3.hash128(header + raw[: 4 * int(c)], HASH_SEED, signed=False)) & KEY_MASK
        for c in lengths
    ]


def keys_at_mmh3_hasher(
    namespace: KeyNamespace, tokens: NDArray[np.int32], lengths: NDArray[np.int64]
) -> list[int]:
    """One pass with an ``mmh3.mmh3_x64_128`` hasher object: feed each segment, digest at each cut.

    In mmh3 5.x ``uintdigest()`` finalises a copy of the state (the hasher stays usable), and
    returns ``h1 | h2 << 64``, so the low 63 bits are the key's bits 0..62 of h1.
    """
    hasher = mmh3.mmh3_x64_128(namespace.header_bytes(), HASH_SEED)
    raw = memoryview(np.asarray(tokens, dtype="<i4").tobytes())
    keys: list[int] = []
    fed = 0
    for c in lengths:
        end = 4 * int(c)
        hasher.update(raw[fed:end])
        fed = end
        keys.append(int(hasher.uintdigest()) & KEY_MASK)
    return keys
