"""View-side kernels: keyless lookup and whole-image patch application (numba).

Owns: ``lookup_key`` (the one-key lookup every other kernel inlines, e.g. the lead's multi-view
index kernels), the batched lookup and the patch-apply kernels. Must not: validate (the wrappers in
``view.py`` do), allocate per key, or know about keys' presence (views store no keys).

Arguments shared by all kernels (the ``ViewArrays`` fields):

* ``params``: ``LudoParams.to_array()``, 10 x ``uint64``, read by the ``params.P_*`` names
  (``P_BUCKETS``, ``P_MA``/``P_MB`` the locator's two sides, ``P_VALUE_BITS``, ``P_FP_BITS`` and
  the four seeds).
* ``seeds``: ``uint8[B]`` per-bucket slot seed.
* ``values``: ``uint32[B*4*vw]``; slot ``s`` of bucket ``b`` is ``values[(b*4+s)*vw + i]`` for
  ``i < vw`` (``vw = value_bits // 32``), little-endian halves (``i = 0`` is the low half).
* ``fps``: ``uint8[B*4*fb]`` (``fb = fp_bits // 8``), little-endian, empty when ``fp_bits == 0``.
* ``locator``: ``uint64[ceil((ma+mb)/64)]``; cell ``c`` is bit ``c & 63`` of word ``c >> 6``.

Lookup reads two locator words and one bucket: bit = A[a] ^ B[b] picks ``b1`` (1) or ``b0`` (0),
the bucket's seed picks the slot, a fingerprint mismatch gives 0 ("no holder").

Why flat arguments, not a tuple: these kernels are called from Python (``LudoView``), and
numba's dispatcher unboxes array arguments in C but a ``NamedTuple`` of them in Python (+1.0 µs
per call measured on the dev VM, against ~1.1 µs for a whole ``lookup_one``). The maintenance
side can group (``state.TableState``) because its Python callers pass one buffer.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.ludo.hashing import Int, bucket_pair, fingerprint, locator_cells, slot_of
from kvcompass.ludo.params import (
    P_BUCKET_SEED,
    P_BUCKETS,
    P_FP_BITS,
    P_FP_SEED,
    P_LOCATOR_SEED,
    P_MA,
    P_MB,
    P_SLOT_SEED,
    P_VALUE_BITS,
)
from kvcompass.ludo.prefetch import prefetch

LOOKUP_AHEAD = 8  # keys between a prefetch and its lookup
_ONE = np.uint64(1)
_S6 = np.uint64(6)
_M63 = np.uint64(63)
_S8 = np.uint64(8)
_S32 = np.uint64(32)


@njit(cache=True)
def locator_bit(locator: NDArray[np.uint64], cell: Int) -> np.uint64:
    """Bit ``cell`` of the packed locator."""
    c = np.uint64(cell)
    return np.uint64((locator[c >> _S6] >> (c & _M63)) & _ONE)


@njit(inline="always", cache=True)
def lookup_key(
    params: NDArray[np.uint64],
    seeds: NDArray[np.uint8],
    values: NDArray[np.uint32],
    fps: NDArray[np.uint8],
    locator: NDArray[np.uint64],
    key: np.uint64,
) -> np.uint64:
    """Value stored for ``key`` (0 = no holder). ``key`` must be < 2**63 (not checked here)."""
    b0, b1 = bucket_pair(key, params[P_BUCKET_SEED], params[P_BUCKETS])
    ca, cb = locator_cells(key, params[P_LOCATOR_SEED], params[P_MA], params[P_MB])
    bucket = b1 if (locator_bit(locator, ca) ^ locator_bit(locator, cb)) == _ONE else b0
    pos = bucket * 4 + slot_of(key, params[P_SLOT_SEED], np.uint64(seeds[bucket]))
    fp_bits = params[P_FP_BITS]
    if fp_bits == 8:
        if np.uint64(fps[pos]) != fingerprint(key, params[P_FP_SEED], fp_bits):
            return np.uint64(0)
    elif fp_bits == 16:
        stored = np.uint64(fps[2 * pos]) | (np.uint64(fps[2 * pos + 1]) << _S8)
        if stored != fingerprint(key, params[P_FP_SEED], fp_bits):
            return np.uint64(0)
    if params[P_VALUE_BITS] == 32:
        return np.uint64(values[pos])
    return np.uint64(values[2 * pos]) | (np.uint64(values[2 * pos + 1]) << _S32)


@njit(cache=True)
def lookup_batch(
    params: NDArray[np.uint64],
    seeds: NDArray[np.uint8],
    values: NDArray[np.uint32],
    fps: NDArray[np.uint8],
    locator: NDArray[np.uint64],
    keys: NDArray[np.uint64],
    out: NDArray[np.uint64],
) -> None:
    """``out[i] = lookup_key(..., keys[i])``, prefetching a few keys ahead."""
    n = keys.shape[0]
    for i in range(n):
        if i + LOOKUP_AHEAD < n:
            prefetch_key(params, seeds, values, fps, locator, keys[i + LOOKUP_AHEAD])
        out[i] = lookup_key(params, seeds, values, fps, locator, keys[i])


@njit(cache=True)
def prefetch_key(
    params: NDArray[np.uint64],
    seeds: NDArray[np.uint8],
    values: NDArray[np.uint32],
    fps: NDArray[np.uint8],
    locator: NDArray[np.uint64],
    key: np.uint64,
) -> None:
    """Prefetch every line a lookup of ``key`` may read (both candidate buckets)."""
    b0, b1 = bucket_pair(key, params[P_BUCKET_SEED], params[P_BUCKETS])
    ca, cb = locator_cells(key, params[P_LOCATOR_SEED], params[P_MA], params[P_MB])
    prefetch(locator, ca >> 6)
    prefetch(locator, cb >> 6)
    prefetch(seeds, b0)
    prefetch(seeds, b1)
    vw = np.int64(params[P_VALUE_BITS]) // 32
    prefetch(values, b0 * 4 * vw)
    prefetch(values, b1 * 4 * vw)
    fb = np.int64(params[P_FP_BITS]) // 8
    if fb > 0:
        prefetch(fps, b0 * 4 * fb)
        prefetch(fps, b1 * 4 * fb)


@njit(cache=True)
def lookup_one(
    params: NDArray[np.uint64],
    seeds: NDArray[np.uint8],
    values: NDArray[np.uint32],
    fps: NDArray[np.uint8],
    locator: NDArray[np.uint64],
    key: np.uint64,
) -> np.uint64:
    """Non-inlined entry point for single lookups from Python."""
    return lookup_key(params, seeds, values, fps, locator, key)


@njit(cache=True)
def apply_images(
    params: NDArray[np.uint64],
    seeds: NDArray[np.uint8],
    values: NDArray[np.uint32],
    fps: NDArray[np.uint8],
    locator: NDArray[np.uint64],
    bucket_ids: NDArray[np.int64],
    bucket_seeds: NDArray[np.uint8],
    bucket_values: NDArray[np.uint64],
    bucket_fps: NDArray[np.uint16],
    word_ids: NDArray[np.int64],
    words: NDArray[np.uint64],
) -> None:
    """Write whole bucket images, then whole locator words (ids already range-checked)."""
    vw = np.int64(params[P_VALUE_BITS]) // 32
    fb = np.int64(params[P_FP_BITS]) // 8
    mask32 = np.uint64(0xFFFFFFFF)
    for i in range(bucket_ids.shape[0]):
        b = bucket_ids[i]
        seeds[b] = bucket_seeds[i]
        for s in range(4):
            pos = b * 4 + s
            v = bucket_values[i, s]
            if vw == 1:
                values[pos] = np.uint32(v & mask32)
            else:
                values[2 * pos] = np.uint32(v & mask32)
                values[2 * pos + 1] = np.uint32(v >> _S32)
            f = bucket_fps[i, s]
            if fb == 1:
                fps[pos] = np.uint8(f & 0xFF)
            elif fb == 2:
                fps[2 * pos] = np.uint8(f & 0xFF)
                fps[2 * pos + 1] = np.uint8(f >> 8)
    for i in range(word_ids.shape[0]):
        locator[word_ids[i]] = words[i]
