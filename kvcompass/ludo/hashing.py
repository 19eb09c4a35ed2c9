"""Seeded 64-bit hash functions of the Ludo index (numba, usable from other kernels).

Owns: the four hash families of one Ludo structure and the reductions that turn a hash into a
bucket, a locator cell, a slot or a fingerprint. Every function takes its seed explicitly; there
is no module state. Must not: allocate, touch arrays, or depend on Python's ``hash()``.

Definitions (all arithmetic modulo 2**64; ``key`` is a 63-bit prefix key as ``uint64``):

* ``mix64(key, seed)``: ``finalize((key ^ seed) * GOLDEN)``, with the SplitMix64 finaliser and
  constant of ``kvcompass.mix`` (a multiply, not SplitMix64's add, before the finaliser: the
  layout of existing view files depends on it).
* ``reduce32(x, n) = (x * n) >> 32`` for ``x, n < 2**32`` (Lemire): uniform in ``[0, n)``.
* candidate buckets: ``h = mix64(key, bucket_seed)``; ``b0 = reduce32(lo32(h), B)``,
  ``b1 = reduce32(hi32(h), B)`` (b0 may equal b1).
* locator cells: ``g = mix64(key, locator_seed)``; ``a = reduce32(lo32(g), ma)``,
  ``b = ma + reduce32(hi32(g), mb)``.
* slot in a bucket with 8-bit seed ``s``: ``mix64(key, slot_seed ^ ((s + 1) * 0xD1B54A32D192ED03))
  >> 62``.
* fingerprint of ``f`` bits (8 or 16): ``mix64(key, fp_seed) >> (64 - f)`` (top bits, independent
  of the slot hash because the seed differs and the slot uses the top 2 bits of another hash).
"""

from __future__ import annotations

from typing import Any, TypeAlias

import numpy as np
from numba import njit

from kvcompass.mix import GOLDEN, finalize

Int: TypeAlias = int | np.integer[Any]
"""Integer scalar as seen by both Python callers and numba kernels."""

_SEED_SPREAD = np.uint64(0xD1B54A32D192ED03)
_LO32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S62 = np.uint64(62)
_S64 = np.uint64(64)
_ONE = np.uint64(1)


@njit(cache=True)
def mix64(key: np.uint64, seed: np.uint64) -> np.uint64:
    """Seeded splitmix64-style mixer; a bijection of ``key`` for a fixed seed."""
    return finalize((np.uint64(key) ^ np.uint64(seed)) * GOLDEN)


@njit(cache=True)
def reduce32(x: np.uint64, n: np.uint64) -> np.uint64:
    """Lemire's multiply-shift reduction of a 32-bit ``x`` into ``[0, n)``."""
    return (np.uint64(x) * np.uint64(n)) >> _S32


@njit(cache=True)
def bucket_pair(key: np.uint64, bucket_seed: np.uint64, n_buckets: np.uint64) -> tuple[Int, Int]:
    """The key's two candidate buckets ``(b0, b1)``."""
    h = mix64(key, bucket_seed)
    b0 = reduce32(h & _LO32, n_buckets)
    b1 = reduce32(h >> _S32, n_buckets)
    return np.int64(b0), np.int64(b1)


@njit(cache=True)
def locator_cells(
    key: np.uint64, locator_seed: np.uint64, ma: np.uint64, mb: np.uint64
) -> tuple[Int, Int]:
    """The key's two locator cells ``(a, b)``: ``a`` in ``[0, ma)``, ``b`` in ``[ma, ma+mb)``."""
    g = mix64(key, locator_seed)
    a = reduce32(g & _LO32, ma)
    b = np.uint64(ma) + reduce32(g >> _S32, mb)
    return np.int64(a), np.int64(b)


@njit(cache=True)
def slot_of(key: np.uint64, slot_seed: np.uint64, bucket_seed8: np.uint64) -> Int:
    """Slot (0..3) of ``key`` in a bucket whose 8-bit seed is ``bucket_seed8``."""
    s = np.uint64(slot_seed) ^ ((np.uint64(bucket_seed8) + _ONE) * _SEED_SPREAD)
    return np.int64(mix64(key, s) >> _S62)


@njit(cache=True)
def fingerprint(key: np.uint64, fp_seed: np.uint64, fp_bits: np.uint64) -> np.uint64:
    """Top ``fp_bits`` bits (8 or 16) of an independent hash of ``key``; 0 when ``fp_bits`` is 0."""
    if fp_bits == 0:
        return np.uint64(0)
    return mix64(key, fp_seed) >> (_S64 - np.uint64(fp_bits))
