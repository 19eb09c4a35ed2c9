"""Maintenance-side (2,4)-cuckoo buckets over a ``TableState`` (numba kernels).

Owns: finding a key, the per-bucket seed search, rewriting a bucket in view slot order, and the
BFS cuckoo path (depth <= 5, visited set). Must not: touch the Othello (``ops.py`` keeps the
locator in step with every move) or allocate per operation.

A bucket's keys sit at their view slots ``slot_of(key, seed)``; the seed (0..254) is chosen so the
bucket's keys land on distinct slots. Paths are planned and every new seed computed BEFORE any
move, so a failure (no path, no seed) leaves the table untouched.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvcompass.ludo.hashing import Int, bucket_pair, slot_of
from kvcompass.ludo.state import M_NB, M_STAMP, TableState

MAX_SEED = 254
MAX_DEPTH = 5
_S32 = np.uint64(32)
_MASK32 = np.uint64(0xFFFFFFFF)
# scratch layout: [0:5) keys, [8:13) entries, [16:21) values, [24:29) fps, [32:40) path buckets,
# [40:48) path drop slots, [48:56) path seeds
SK, SE, SV, SF, PB, PD, PS = 0, 8, 16, 24, 32, 40, 48


@njit(inline="always", cache=True)
def get_value(st: TableState, pos: Int) -> np.uint64:
    if st.params[4] == 32:
        return np.uint64(st.values[pos])
    return np.uint64(st.values[2 * pos]) | (np.uint64(st.values[2 * pos + 1]) << _S32)


@njit(inline="always", cache=True)
def put_value(st: TableState, pos: Int, v: np.uint64) -> None:
    if st.params[4] == 32:
        st.values[pos] = np.uint32(v & _MASK32)
    else:
        st.values[2 * pos] = np.uint32(v & _MASK32)
        st.values[2 * pos + 1] = np.uint32(v >> _S32)


@njit(inline="always", cache=True)
def get_fp(st: TableState, pos: Int) -> np.uint64:
    fb = st.params[5]
    if fb == 8:
        return np.uint64(st.fps[pos])
    if fb == 16:
        return np.uint64(st.fps[2 * pos]) | (np.uint64(st.fps[2 * pos + 1]) << np.uint64(8))
    return np.uint64(0)


@njit(inline="always", cache=True)
def put_fp(st: TableState, pos: Int, f: np.uint64) -> None:
    fb = st.params[5]
    if fb == 8:
        st.fps[pos] = np.uint8(f & np.uint64(0xFF))
    elif fb == 16:
        st.fps[2 * pos] = np.uint8(f & np.uint64(0xFF))
        st.fps[2 * pos + 1] = np.uint8(f >> np.uint64(8))


@njit(inline="always", cache=True)
def mark_bucket(st: TableState, b: Int) -> None:
    if st.bdirty[b] == 0:
        st.bdirty[b] = 1
        st.blist[st.meta[M_NB]] = b
        st.meta[M_NB] += 1


@njit(inline="always", cache=True)
def find(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
    """Slot position of ``key`` or -1."""
    for s in range(4):
        p = b0 * 4 + s
        if st.sentry[p] >= 0 and st.skeys[p] == key:
            return p
    for s in range(4):
        p = b1 * 4 + s
        if st.sentry[p] >= 0 and st.skeys[p] == key:
            return p
    return -1


@njit(inline="always", cache=True)
def count(st: TableState, b: Int) -> Int:
    n = 0
    for s in range(4):
        if st.sentry[b * 4 + s] >= 0:
            n += 1
    return n


@njit(cache=True)
def choose_seed(st: TableState, b: Int, drop_pos: Int, extra_key: np.uint64) -> Int:
    """Seed putting bucket ``b``'s keys (minus ``drop_pos``) plus ``extra_key`` on distinct slots.

    Tries the current seed first (nothing moves), then 0..254; -1 if none works.
    """
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop_pos and st.sentry[p] >= 0:
            st.scratch[SK + n] = st.skeys[p]
            n += 1
    st.scratch[SK + n] = extra_key
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
            bit = np.int64(1) << slot_of(st.scratch[SK + i], slot_seed, np.uint64(sigma))
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

    Moves entries' ``epos``; the caller has checked that ``sigma`` puts them on distinct slots.
    """
    n = 0
    for s in range(4):
        p = b * 4 + s
        if p != drop_pos and st.sentry[p] >= 0:
            st.scratch[SK + n] = st.skeys[p]
            st.scratch[SE + n] = np.uint64(st.sentry[p])
            st.scratch[SV + n] = get_value(st, p)
            st.scratch[SF + n] = get_fp(st, p)
            n += 1
        st.sentry[p] = -1
        st.skeys[p] = 0
        put_value(st, p, np.uint64(0))
        put_fp(st, p, np.uint64(0))
    st.scratch[SK + n] = key
    st.scratch[SE + n] = np.uint64(e)
    st.scratch[SV + n] = v
    st.scratch[SF + n] = f
    n += 1
    st.seeds[b] = np.uint8(sigma)
    slot_seed = st.params[8]
    for i in range(n):
        k = st.scratch[SK + i]
        p = b * 4 + slot_of(k, slot_seed, np.uint64(sigma))
        ent = np.int64(st.scratch[SE + i])
        st.skeys[p] = k
        st.sentry[p] = ent
        put_value(st, p, st.scratch[SV + i])
        put_fp(st, p, st.scratch[SF + i])
        st.epos[ent] = p
    mark_bucket(st, b)


@njit(cache=True)
def plan_path(st: TableState, key: np.uint64, b0: Int, b1: Int) -> Int:
    """BFS for a bucket with a free slot; writes the path root->free into scratch.

    Returns the path length d (1 = a root has room) or 0 if none within depth 5 or a seed
    search on the path fails. Path bucket i is ``scratch[PB+i]``; ``scratch[PD+i]`` is the slot
    of the key leaving it (for i < d-1); ``scratch[PS+i]`` is its new seed.
    """
    st.meta[M_STAMP] += 1
    stamp = st.meta[M_STAMP]
    tail = 0
    for r in range(2):
        root = b0 if r == 0 else b1
        if r == 1 and b1 == b0:
            break
        st.mark[root] = stamp
        st.qbucket[tail] = root
        st.qparent[tail] = -1
        st.qslot[tail] = -1
        st.qdepth[tail] = 1
        tail += 1
    found = -1
    qi = 0
    while qi < tail:
        x = st.qbucket[qi]
        if count(st, x) < 4:
            found = qi
            break
        if st.qdepth[qi] < MAX_DEPTH:
            for s in range(4):
                p = x * 4 + s
                y0, y1 = bucket_pair(st.skeys[p], st.params[6], st.params[1])
                alt = y1 if y0 == x else y0
                if alt != x and st.mark[alt] != stamp:
                    st.mark[alt] = stamp
                    st.qbucket[tail] = alt
                    st.qparent[tail] = qi
                    st.qslot[tail] = p
                    st.qdepth[tail] = st.qdepth[qi] + 1
                    tail += 1
        qi += 1
    if found < 0:
        return 0
    d = st.qdepth[found]
    node = found
    for i in range(d - 1, -1, -1):
        st.scratch[PB + i] = np.uint64(st.qbucket[node])
        if i > 0:
            st.scratch[PD + i - 1] = np.uint64(st.qslot[node])
        node = st.qparent[node]
    # incoming key of bucket i is the key leaving bucket i-1 (or the new key for i = 0)
    for i in range(d):
        x = np.int64(st.scratch[PB + i])
        drop = np.int64(st.scratch[PD + i]) if i < d - 1 else -1
        incoming = key if i == 0 else st.skeys[np.int64(st.scratch[PD + i - 1])]
        sigma = choose_seed(st, x, drop, incoming)
        if sigma < 0:
            return 0
        st.scratch[PS + i] = np.uint64(sigma)
    return np.int64(d)
