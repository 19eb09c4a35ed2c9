"""Maintenance-side (2,4)-cuckoo buckets over a ``TableState`` (numba kernels).

Owns: finding a key, the per-bucket seed search, rewriting a bucket in view slot order, and the
BFS cuckoo path (depth <= 5, visited set). Must not: touch the Othello (``ops.py`` keeps the
locator in step with every move) or allocate per operation.

A bucket's keys sit at their view slots ``slot_of(key, seed)``; the seed (0..254) is chosen so the
bucket's keys land on distinct slots. Paths are planned and every new seed computed BEFORE any
move, so a failure (no path, no seed) leaves the table untouched.

Calling convention (every kernel here and in ``othello.py``/``placement.py``/``ops.py``): a helper
that works on the table's structure takes ``st``, the ``TableState`` the entry kernel unpacked
from ``mem``, and reads sizes and seeds from ``st.params`` by the ``P_*`` names; a leaf accessor
over one array (``get_value``, ``find``, ``is_full``...) takes that array. The helpers are
``jit.inlined`` and compiled without numba's reference-counting runtime (``jit.py``), so ``st``
costs nothing to pass: after inlining, ``st.skeys`` is the same register as a local array.
"""

from __future__ import annotations

import numpy as np

from kvcompass.ludo.hashing import Int, bucket_pair, slot_of
from kvcompass.ludo.jit import inlined, kernel
from kvcompass.ludo.params import P_BUCKET_SEED, P_BUCKETS, P_FP_BITS, P_SLOT_SEED, P_VALUE_BITS
from kvcompass.ludo.prefetch import prefetch
from kvcompass.ludo.state import (
    EMPTY,
    M_BFS,
    M_BFS_NODES,
    M_LEVELS,
    M_NB,
    M_STAMP,
    U8,
    U32,
    U64,
    TableState,
)

MAX_SEED = 254
MAX_DEPTH = 5
STAMP_LIMIT = (1 << 31) - 1
_S8 = np.uint64(8)
_S32 = np.uint64(32)
_MASK8 = np.uint64(0xFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_ZERO = np.uint64(0)
# scratch layout: [0:5) keys, [8:13) entries, [16:21) values, [24:29) fps, [32:40) path buckets,
# [40:48) path drop slots, [48:56) path seeds (placement.py uses [56:72))
SK, SE, SV, SF, PB, PD, PS = 0, 8, 16, 24, 32, 40, 48


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
def get_fp(fps: U8, fp_bits: Int, pos: Int) -> np.uint64:
    if fp_bits == 8:
        return np.uint64(fps[pos])
    if fp_bits == 16:
        return np.uint64(fps[2 * pos]) | (np.uint64(fps[2 * pos + 1]) << _S8)
    return _ZERO


@kernel
def put_fp(fps: U8, fp_bits: Int, pos: Int, f: np.uint64) -> None:
    if fp_bits == 8:
        fps[pos] = np.uint8(f & _MASK8)
    elif fp_bits == 16:
        fps[2 * pos] = np.uint8(f & _MASK8)
        fps[2 * pos + 1] = np.uint8(f >> _S8)


@inlined
def mark_bucket(st: TableState, b: Int) -> None:
    """List bucket ``b`` as dirty, once per call (its image goes into the call's batch)."""
    if st.bdirty[b] == 0:
        st.bdirty[b] = 1
        st.blist[st.meta[M_NB]] = b
        st.meta[M_NB] += 1


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
def choose_seed(st: TableState, b: Int, drop: Int, extra_key: np.uint64) -> Int:
    """Seed putting bucket ``b``'s keys (minus slot ``drop``) plus ``extra_key`` on distinct slots.

    Tries the current seed first (nothing moves), then 0..254; -1 if none works.
    """
    skeys, scratch = st.skeys, st.scratch
    slot_seed = st.params[P_SLOT_SEED]
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop and skeys[p] != EMPTY:
            scratch[SK + n] = skeys[p]
            n += 1
    scratch[SK + n] = extra_key
    n += 1
    current = np.int64(st.seeds[b])
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
    st: TableState,
    b: Int,
    sigma: Int,
    drop: Int,
    key: np.uint64,
    entry: Int,
    value: np.uint64,
    fp: np.uint64,
) -> None:
    """Re-lay bucket ``b`` with seed ``sigma``: its keys minus slot ``drop`` plus ``key`` (with
    its entry id, value and fingerprint).

    The caller has checked that ``sigma`` puts them on distinct slots.
    """
    skeys, sentry, values, fps, scratch = st.skeys, st.sentry, st.values, st.fps, st.scratch
    wide = st.params[P_VALUE_BITS] == 64
    fp_bits = np.int64(st.params[P_FP_BITS])
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop and skeys[p] != EMPTY:
            scratch[SK + n] = skeys[p]
            scratch[SE + n] = np.uint64(sentry[p])
            scratch[SV + n] = get_value(values, wide, p)
            scratch[SF + n] = get_fp(fps, fp_bits, p)
            n += 1
        sentry[p] = -1
        skeys[p] = EMPTY
        put_value(values, wide, p, _ZERO)
        put_fp(fps, fp_bits, p, _ZERO)
    scratch[SK + n] = key
    scratch[SE + n] = np.uint64(entry)
    scratch[SV + n] = value
    scratch[SF + n] = fp
    n += 1
    st.seeds[b] = np.uint8(sigma)
    slot_seed = st.params[P_SLOT_SEED]
    for i in range(n):
        k = scratch[SK + i]
        p = b * 4 + slot_of(k, slot_seed, np.uint64(sigma))
        skeys[p] = k
        sentry[p] = np.int64(scratch[SE + i])
        put_value(values, wide, p, scratch[SV + i])
        put_fp(fps, fp_bits, p, scratch[SF + i])
    set_full(st.bfull, b, n == 4)
    mark_bucket(st, b)


@inlined
def root_path(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
    """The common case: a root (b0 first) has a free slot. Path length 1, or 0 (both full)."""
    for r in range(2):
        root = b0 if r == 0 else b1
        if count(st.skeys, root) < 4:
            sigma = choose_seed(st, root, -1, key)
            if sigma < 0:
                continue
            st.scratch[PB] = np.uint64(root)
            st.scratch[PS] = np.uint64(sigma)
            return 1
    return 0


@inlined
def bfs_path(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
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
    skeys, scratch, meta, mark, bfull = st.skeys, st.scratch, st.meta, st.mark, st.bfull
    qbucket, qparent, qslot, qdepth, qalt = st.qbucket, st.qparent, st.qslot, st.qdepth, st.qalt
    bucket_seed, n_buckets = st.params[P_BUCKET_SEED], st.params[P_BUCKETS]
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
    value_words = 2 if st.params[P_VALUE_BITS] == 64 else 1
    fp_bytes = np.int64(st.params[P_FP_BITS]) // 8
    for i in range(d - 1, -1, -1):
        x = qbucket[node]
        scratch[PB + i] = np.uint64(x)
        if i > 0:
            scratch[PD + i - 1] = np.uint64(qslot[node])
        node = qparent[node]
        # the seed search and the moves below read these lines: start their misses together
        prefetch(skeys, x * 4)
        prefetch(st.sentry, x * 4)
        prefetch(st.values, x * 4 * value_words)
        prefetch(st.seeds, x)
        if fp_bytes > 0:
            prefetch(st.fps, x * 4 * fp_bytes)
    # incoming key of bucket i is the key leaving bucket i-1 (or the new key for i = 0)
    for i in range(d):
        x = np.int64(scratch[PB + i])
        drop = np.int64(scratch[PD + i]) if i < d - 1 else -1
        incoming = key if i == 0 else skeys[np.int64(scratch[PD + i - 1])]
        sigma = choose_seed(st, x, drop, incoming)
        if sigma < 0:
            return 0
        scratch[PS + i] = np.uint64(sigma)
    return np.int64(d)
