"""Maintenance-side (2,4)-cuckoo buckets over a ``TableState`` (numba kernels).

Owns: finding a key, the per-bucket seed search, rewriting a bucket in view slot order, and the
BFS cuckoo path (depth <= 5, visited set). Must not: touch the Othello (``ops.py`` keeps the
locator in step with every move) or allocate per operation.

A bucket's keys sit at their view slots ``slot_of(key, seed)``; the seed (0..254) is chosen so the
bucket's keys land on distinct slots. Paths are planned and every new seed computed BEFORE any
move, so a failure (no path, no seed) leaves the table untouched.

Numba notes (apply to every kernel here and in ``othello.py``/``ops.py``):

* Hot functions take the arrays they use explicitly; functions that take the ``TableState`` tuple
  read its arrays into locals at their top. Numba reference-counts tuple members read inside
  branches, and those atomic updates serialise the cache misses this code is bound by (measured
  3-40x slower per call).
* They are compiled by ``jit.kernel`` (no reference-counting runtime: see ``jit.py``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kvcompass.ludo.hashing import Int, bucket_pair, slot_of
from kvcompass.ludo.jit import inlined, kernel
from kvcompass.ludo.prefetch import prefetch
from kvcompass.ludo.state import EMPTY, M_BFS, M_BFS_NODES, M_LEVELS, M_NB, M_STAMP

MAX_SEED = 254
MAX_DEPTH = 5
STAMP_LIMIT = (1 << 31) - 1
_S8 = np.uint64(8)
_S32 = np.uint64(32)
_MASK8 = np.uint64(0xFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_ZERO = np.uint64(0)
# scratch layout: [0:5) keys, [8:13) entries, [16:21) values, [24:29) fps, [32:40) path buckets,
# [40:48) path drop slots, [48:56) path seeds (ops.py uses [56:72))
SK, SE, SV, SF, PB, PD, PS = 0, 8, 16, 24, 32, 40, 48

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
U8 = NDArray[np.uint8]
U32 = NDArray[np.uint32]
U64 = NDArray[np.uint64]


@kernel
def get_value(values: U32, wide: bool, pos: Int) -> np.uint64:
    if wide:
        return np.uint64(values[2 * pos]) | (np.uint64(values[2 * pos + 1]) << _S32)
    return np.uint64(values[pos])


@kernel
def put_value(values: U32, wide: bool, pos: Int, v: np.uint64) -> None:
    if wide:
        values[2 * pos] = np.uint32(v & _MASK32)
        values[2 * pos + 1] = np.uint32(v >> _S32)
    else:
        values[pos] = np.uint32(v & _MASK32)


@kernel
def get_fp(fps: U8, fb: Int, pos: Int) -> np.uint64:
    if fb == 8:
        return np.uint64(fps[pos])
    if fb == 16:
        return np.uint64(fps[2 * pos]) | (np.uint64(fps[2 * pos + 1]) << _S8)
    return _ZERO


@kernel
def put_fp(fps: U8, fb: Int, pos: Int, f: np.uint64) -> None:
    if fb == 8:
        fps[pos] = np.uint8(f & _MASK8)
    elif fb == 16:
        fps[2 * pos] = np.uint8(f & _MASK8)
        fps[2 * pos + 1] = np.uint8(f >> _S8)


@inlined
def mark_bucket(bdirty: U8, blist: I32, meta: I64, b: Int) -> None:
    if bdirty[b] == 0:
        bdirty[b] = 1
        blist[meta[M_NB]] = b
        meta[M_NB] += 1


@inlined
def is_full(bfull: U64, b: Int) -> bool:
    return bool(((bfull[b >> 6] >> np.uint64(b & 63)) & np.uint64(1)) != _ZERO)


@inlined
def set_full(bfull: U64, b: Int, full: bool) -> None:
    bit = np.uint64(1) << np.uint64(b & 63)
    if full:
        bfull[b >> 6] |= bit
    else:
        bfull[b >> 6] &= ~bit


@inlined
def find(skeys: U64, key: np.uint64, b0: Int, b1: Int) -> Int:
    """Slot position of ``key`` or -1 (free slots hold ``EMPTY``, never a valid key)."""
    for s in range(4):
        if skeys[b0 * 4 + s] == key:
            return b0 * 4 + s
    for s in range(4):
        if skeys[b1 * 4 + s] == key:
            return b1 * 4 + s
    return -1


@inlined
def count(skeys: U64, b: Int) -> Int:
    n = 0
    for s in range(4):
        if skeys[b * 4 + s] != EMPTY:
            n += 1
    return n


@inlined
def choose_seed(
    skeys: U64,
    seeds: U8,
    scratch: U64,
    slot_seed: np.uint64,
    b: Int,
    drop: Int,
    extra_key: np.uint64,
) -> Int:
    """Seed putting bucket ``b``'s keys (minus slot ``drop``) plus ``extra_key`` on distinct slots.

    Tries the current seed first (nothing moves), then 0..254; -1 if none works.
    """
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop and skeys[p] != EMPTY:
            scratch[SK + n] = skeys[p]
            n += 1
    scratch[SK + n] = extra_key
    n += 1
    current = np.int64(seeds[b])
    for t in range(-1, MAX_SEED + 1):
        sigma = current if t < 0 else t
        if t == current:
            continue
        used = np.int64(0)
        ok = True
        for i in range(n):
            bit = np.int64(1) << slot_of(scratch[SK + i], slot_seed, np.uint64(sigma))
            if used & bit:
                ok = False
                break
            used |= bit
        if ok:
            return sigma
    return -1


@inlined
def rewrite(
    skeys: U64,
    sentry: I32,
    values: U32,
    fps: U8,
    seeds: U8,
    scratch: U64,
    bdirty: U8,
    blist: I32,
    meta: I64,
    bfull: U64,
    wide: bool,
    fb: Int,
    slot_seed: np.uint64,
    b: Int,
    sigma: Int,
    drop: Int,
    key: np.uint64,
    e: Int,
    v: np.uint64,
    f: np.uint64,
) -> None:
    """Re-lay bucket ``b`` with seed ``sigma``: its keys minus slot ``drop`` plus the new one.

    The caller has checked that ``sigma`` puts them on distinct slots.
    """
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop and skeys[p] != EMPTY:
            scratch[SK + n] = skeys[p]
            scratch[SE + n] = np.uint64(sentry[p])
            scratch[SV + n] = get_value(values, wide, p)
            scratch[SF + n] = get_fp(fps, fb, p)
            n += 1
        sentry[p] = -1
        skeys[p] = EMPTY
        put_value(values, wide, p, _ZERO)
        put_fp(fps, fb, p, _ZERO)
    scratch[SK + n] = key
    scratch[SE + n] = np.uint64(e)
    scratch[SV + n] = v
    scratch[SF + n] = f
    n += 1
    seeds[b] = np.uint8(sigma)
    for i in range(n):
        k = scratch[SK + i]
        p = b * 4 + slot_of(k, slot_seed, np.uint64(sigma))
        skeys[p] = k
        sentry[p] = np.int64(scratch[SE + i])
        put_value(values, wide, p, scratch[SV + i])
        put_fp(fps, fb, p, scratch[SF + i])
    set_full(bfull, b, n == 4)
    mark_bucket(bdirty, blist, meta, b)


@inlined
def root_path(
    skeys: U64, seeds: U8, scratch: U64, slot_seed: np.uint64, key: np.uint64, b0: Int, b1: Int
) -> Int:
    """The common case: a root (b0 first) has a free slot. Path length 1, or 0 (both full)."""
    for r in range(2):
        root = b0 if r == 0 else b1
        if count(skeys, root) < 4:
            sigma = choose_seed(skeys, seeds, scratch, slot_seed, root, -1, key)
            if sigma < 0:
                continue
            scratch[PB] = np.uint64(root)
            scratch[PS] = np.uint64(sigma)
            return 1
    return 0


@inlined
def bfs_path(
    params: U64,
    skeys: U64,
    sentry: I32,
    values: U32,
    fps: U8,
    seeds: U8,
    scratch: U64,
    meta: I64,
    mark: I32,
    bfull: U64,
    qbucket: I32,
    qparent: I32,
    qslot: I32,
    qdepth: I32,
    qalt: I32,
    key: np.uint64,
    b0: Int,
    b1: Int,
) -> Int:
    """BFS (depth <= 5, visited set) for a bucket with room; writes the path into scratch.

    Returns the path length d or 0 if there is none or a seed search on the path fails. Path
    bucket i is ``scratch[PB+i]`` (root first); ``scratch[PD+i]`` is the slot of the key leaving
    it (i < d-1); ``scratch[PS+i]`` is its new seed.

    Level-synchronous, children in (parent, slot) order; the first child with room ends the
    search (the shallowest, first in that order). Room is read from ``bfull``, not from the
    child's keys, so finding a path of depth d reads the keys of d-1 levels only (the roots'
    are prefetched by the caller). A child with room is never a visited bucket (every bucket
    visited so far is full), so the visited check is needed only for the full children queued
    for the next level, and the last level queues none. ``M_BFS_NODES`` counts the buckets
    queued (the roots, the full children expanded, the one found).
    """
    bucket_seed, n_buckets, slot_seed = params[6], params[1], params[8]
    if meta[M_STAMP] >= STAMP_LIMIT:  # int32 marks: start over before the stamp would wrap
        mark[:] = 0
        meta[M_STAMP] = 0
    meta[M_STAMP] += 1
    stamp = meta[M_STAMP]
    tail = 0
    for r in range(2):
        root = b0 if r == 0 else b1
        if r == 1 and b1 == b0:
            break
        mark[root] = stamp
        qbucket[tail] = root
        qparent[tail] = -1
        qslot[tail] = -1
        qdepth[tail] = 1
        tail += 1
    found = -1
    for qi in range(tail):  # a root with room ends the search at once
        if not is_full(bfull, qbucket[qi]):
            found = qi
            break
    lo, hi, depth = 0, tail, 1
    while found < 0 and depth < MAX_DEPTH and lo < hi:
        if depth > 1:
            meta[M_LEVELS] += 1
        nc = 0
        for qi in range(lo, hi):
            x = qbucket[qi]
            for s in range(4):
                y0, y1 = bucket_pair(skeys[x * 4 + s], bucket_seed, n_buckets)
                alt = y1 if y0 == x else y0
                qalt[nc] = alt
                nc += 1
        hit = -1
        for c in range(nc):
            alt = qalt[c]
            if alt != qbucket[lo + c // 4] and not is_full(bfull, alt):
                hit = c
                break
        if hit >= 0:
            qi = lo + hit // 4
            qbucket[tail] = qalt[hit]
            qparent[tail] = qi
            qslot[tail] = qbucket[qi] * 4 + hit % 4
            qdepth[tail] = depth + 1
            found = tail
            tail += 1
            break
        if depth + 1 < MAX_DEPTH:  # queue the next level; its keys are read next round
            for c in range(nc):
                alt = qalt[c]
                qi = lo + c // 4
                if alt != qbucket[qi] and mark[alt] != stamp:
                    mark[alt] = stamp
                    prefetch(skeys, alt * 4)
                    qbucket[tail] = alt
                    qparent[tail] = qi
                    qslot[tail] = qbucket[qi] * 4 + c % 4
                    qdepth[tail] = depth + 1
                    tail += 1
        lo, hi, depth = hi, tail, depth + 1
    meta[M_BFS] += 1
    meta[M_BFS_NODES] += tail
    if found < 0:
        return 0
    d = qdepth[found]
    node = found
    vw = 2 if params[4] == 64 else 1
    fw = np.int64(params[5]) // 8
    for i in range(d - 1, -1, -1):
        x = qbucket[node]
        scratch[PB + i] = np.uint64(x)
        if i > 0:
            scratch[PD + i - 1] = np.uint64(qslot[node])
        node = qparent[node]
        # the seed search and the moves below read these lines: start their misses together
        prefetch(skeys, x * 4)
        prefetch(sentry, x * 4)
        prefetch(values, x * 4 * vw)
        prefetch(seeds, x)
        if fw > 0:
            prefetch(fps, x * 4 * fw)
    # incoming key of bucket i is the key leaving bucket i-1 (or the new key for i = 0)
    for i in range(d):
        x = np.int64(scratch[PB + i])
        drop = np.int64(scratch[PD + i]) if i < d - 1 else -1
        incoming = key if i == 0 else skeys[np.int64(scratch[PD + i - 1])]
        sigma = choose_seed(skeys, seeds, scratch, slot_seed, x, drop, incoming)
        if sigma < 0:
            return 0
        scratch[PS + i] = np.uint64(sigma)
    return np.int64(d)
