"""Maintenance-side (2,4)-cuckoo buckets over a ``TableState`` (numba kernels).

Owns: finding a key, the per-bucket seed search, rewriting a bucket in view slot order, and the
BFS cuckoo path (depth <= 5, visited set). Must not: touch the Othello (``ops.py`` keeps the
locator in step with every move) or allocate per operation.

A bucket's keys sit at their view slots ``slot_of(key, seed)``; the seed (0..254) is chosen so the
bucket's keys land on distinct slots. Paths are planned and every new seed computed BEFORE any
move, so a failure (no path, no seed) leaves the table untouched.

Numba note (applies to every kernel over ``TableState``): each function reads the arrays it needs
out of ``st`` into locals at its top. Reading ``st.x`` inside a branch makes numba emit atomic
reference-count updates there, which serialise the cache misses this code is bound by (measured
~40x slower per call).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvcompass.ludo.hashing import Int, bucket_pair, slot_of
from kvcompass.ludo.state import EMPTY, M_NB, M_STAMP, TableState

MAX_SEED = 254
MAX_DEPTH = 5
_S8 = np.uint64(8)
_S32 = np.uint64(32)
_MASK8 = np.uint64(0xFF)
_MASK32 = np.uint64(0xFFFFFFFF)
_ZERO = np.uint64(0)
# scratch layout: [0:5) keys, [8:13) entries, [16:21) values, [24:29) fps, [32:40) path buckets,
# [40:48) path drop slots, [48:56) path seeds
SK, SE, SV, SF, PB, PD, PS = 0, 8, 16, 24, 32, 40, 48


@njit(cache=True)
def get_value(st: TableState, pos: Int) -> np.uint64:
    values = st.values
    wide = st.params[4] == 64
    if wide:
        return np.uint64(values[2 * pos]) | (np.uint64(values[2 * pos + 1]) << _S32)
    return np.uint64(values[pos])


@njit(cache=True)
def put_value(st: TableState, pos: Int, v: np.uint64) -> None:
    values = st.values
    wide = st.params[4] == 64
    if wide:
        values[2 * pos] = np.uint32(v & _MASK32)
        values[2 * pos + 1] = np.uint32(v >> _S32)
    else:
        values[pos] = np.uint32(v & _MASK32)


@njit(cache=True)
def get_fp(st: TableState, pos: Int) -> np.uint64:
    fps = st.fps
    fb = st.params[5]
    if fb == 8:
        return np.uint64(fps[pos])
    if fb == 16:
        return np.uint64(fps[2 * pos]) | (np.uint64(fps[2 * pos + 1]) << _S8)
    return _ZERO


@njit(cache=True)
def put_fp(st: TableState, pos: Int, f: np.uint64) -> None:
    fps = st.fps
    fb = st.params[5]
    if fb == 8:
        fps[pos] = np.uint8(f & _MASK8)
    elif fb == 16:
        fps[2 * pos] = np.uint8(f & _MASK8)
        fps[2 * pos + 1] = np.uint8(f >> _S8)


@njit(cache=True)
def mark_bucket(st: TableState, b: Int) -> None:
    bdirty = st.bdirty
    blist = st.blist
    meta = st.meta
    if bdirty[b] == 0:
        bdirty[b] = 1
        blist[meta[M_NB]] = b
        meta[M_NB] += 1


@njit(cache=True)
def find(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
    """Slot position of ``key`` or -1 (free slots hold ``EMPTY``, never a valid key)."""
    skeys = st.skeys
    for s in range(4):
        if skeys[b0 * 4 + s] == key:
            return b0 * 4 + s
    for s in range(4):
        if skeys[b1 * 4 + s] == key:
            return b1 * 4 + s
    return -1


@njit(cache=True)
def count(st: TableState, b: Int) -> Int:
    skeys = st.skeys
    n = 0
    for s in range(4):
        if skeys[b * 4 + s] != EMPTY:
            n += 1
    return n


@njit(cache=True)
def choose_seed(st: TableState, b: Int, drop_pos: Int, extra_key: np.uint64) -> Int:
    """Seed putting bucket ``b``'s keys (minus ``drop_pos``) plus ``extra_key`` on distinct slots.

    Tries the current seed first (nothing moves), then 0..254; -1 if none works.
    """
    skeys = st.skeys
    scratch = st.scratch
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop_pos and skeys[p] != EMPTY:
            scratch[SK + n] = skeys[p]
            n += 1
    scratch[SK + n] = extra_key
    n += 1
    slot_seed = st.params[8]
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


@njit(cache=True)
def rewrite(
    st: TableState,
    b: Int,
    sigma: Int,
    drop_pos: Int,
    key: np.uint64,
    e: Int,
    v: np.uint64,
    f: np.uint64,
) -> None:
    """Re-lay bucket ``b`` with seed ``sigma``: its keys minus ``drop_pos`` plus ``(key, e, v, f)``.

    The caller has checked that ``sigma`` puts them on distinct slots.
    """
    skeys = st.skeys
    sentry = st.sentry
    scratch = st.scratch
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop_pos and skeys[p] != EMPTY:
            scratch[SK + n] = skeys[p]
            scratch[SE + n] = np.uint64(sentry[p])
            scratch[SV + n] = get_value(st, p)
            scratch[SF + n] = get_fp(st, p)
            n += 1
        sentry[p] = -1
        skeys[p] = EMPTY
        put_value(st, p, _ZERO)
        put_fp(st, p, _ZERO)
    scratch[SK + n] = key
    scratch[SE + n] = np.uint64(e)
    scratch[SV + n] = v
    scratch[SF + n] = f
    n += 1
    st.seeds[b] = np.uint8(sigma)
    slot_seed = st.params[8]
    for i in range(n):
        k = scratch[SK + i]
        p = b * 4 + slot_of(k, slot_seed, np.uint64(sigma))
        skeys[p] = k
        sentry[p] = np.int64(scratch[SE + i])
        put_value(st, p, scratch[SV + i])
        put_fp(st, p, scratch[SF + i])
    mark_bucket(st, b)


@njit(cache=True)
def plan_path(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
    """Find room for ``key``: a root with a free slot, else BFS; writes the path into scratch.

    Returns the path length d (1 = a root has room) or 0 if there is none within depth 5 or a
    seed search on the path fails. Path bucket i is ``scratch[PB+i]`` (root first);
    ``scratch[PD+i]`` is the slot of the key leaving it (i < d-1); ``scratch[PS+i]`` its new seed.
    """
    scratch = st.scratch
    for r in range(2):  # common case first: a root has room, no BFS bookkeeping
        root = b0 if r == 0 else b1
        if count(st, root) < 4:
            sigma = choose_seed(st, root, -1, key)
            if sigma < 0:
                return 0
            scratch[PB] = np.uint64(root)
            scratch[PS] = np.uint64(sigma)
            return 1
    return _bfs(st, key, b0, b1)


@njit(cache=True)
def _bfs(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
    skeys = st.skeys
    mark = st.mark
    qbucket = st.qbucket
    qparent = st.qparent
    qslot = st.qslot
    qdepth = st.qdepth
    scratch = st.scratch
    bucket_seed = st.params[6]
    n_buckets = st.params[1]
    st.meta[M_STAMP] += 1
    stamp = st.meta[M_STAMP]
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
    qi = 0
    while qi < tail:
        x = qbucket[qi]
        if count(st, x) < 4:
            found = qi
            break
        if qdepth[qi] < MAX_DEPTH:
            for s in range(4):
                p = x * 4 + s
                y0, y1 = bucket_pair(skeys[p], bucket_seed, n_buckets)
                alt = y1 if y0 == x else y0
                if alt != x and mark[alt] != stamp:
                    mark[alt] = stamp
                    qbucket[tail] = alt
                    qparent[tail] = qi
                    qslot[tail] = p
                    qdepth[tail] = qdepth[qi] + 1
                    tail += 1
        qi += 1
    if found < 0:
        return 0
    d = qdepth[found]
    node = found
    for i in range(d - 1, -1, -1):
        scratch[PB + i] = np.uint64(qbucket[node])
        if i > 0:
            scratch[PD + i - 1] = np.uint64(qslot[node])
        node = qparent[node]
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
