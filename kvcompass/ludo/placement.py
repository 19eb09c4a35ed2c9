"""Executing one removal or one planned insert over explicit arrays (numba kernels).

Owns: ``remove_at`` (empty a slot, unlink the key's Othello edge, free its entry), ``place``
(move keys along a path planned by ``cuckoo``, deepest first, re-seeding each bucket, flipping
the locator bits of moved keys, then adding the new key's edge) and ``prefetch_op`` (what an
operation on a key will touch first). Must not: decide what to do with a key (``ops.py`` does)
or grow the table.
"""

from __future__ import annotations

import numpy as np

from kvcompass.ludo.cuckoo import (
    PB,
    PD,
    PS,
    find,
    get_fp,
    get_value,
    is_full,
    mark_bucket,
    put_fp,
    put_value,
    rewrite,
    set_full,
)
from kvcompass.ludo.hashing import Int, bucket_pair, fingerprint, locator_cells
from kvcompass.ludo.jit import inlined
from kvcompass.ludo.othello import add_edge, remove_edge, set_bit, want_bit
from kvcompass.ludo.params import (
    P_BUCKET_SEED,
    P_BUCKETS,
    P_FP_BITS,
    P_FP_SEED,
    P_LOCATOR_SEED,
    P_MA,
    P_MB,
    P_VALUE_BITS,
)
from kvcompass.ludo.prefetch import prefetch
from kvcompass.ludo.state import EMPTY, M_FREE_E, M_KICKS, M_LIVE, TableState

_ZERO = np.uint64(0)
_PM = 56  # scratch[56:61): entry of the key entering path bucket i (i >= 1)
_PK = 64  # scratch[64:69): that key


@inlined
def remove_at(st: TableState, pos: Int) -> None:
    """Remove the key at slot ``pos``: empty slot (value 0), Othello edge gone, entry freed."""
    set_full(st.bfull, pos >> 2, False)
    e = st.sentry[pos]
    st.sentry[pos] = -1
    st.skeys[pos] = EMPTY
    put_value(st.values, st.params[P_VALUE_BITS] == 64, pos, _ZERO)
    put_fp(st.fps, np.int64(st.params[P_FP_BITS]), pos, _ZERO)
    mark_bucket(st, pos >> 2)
    remove_edge(st, e)
    meta = st.meta
    st.free_entries[meta[M_FREE_E]] = e
    meta[M_FREE_E] += 1
    meta[M_LIVE] -= 1


@inlined
def place(st: TableState, key: np.uint64, v: np.uint64, d: Int) -> bool:
    """Move keys along the planned path of length ``d`` (deepest first), place ``key`` with value
    ``v``, fix the Othello.

    Returns False if the new key's edge would close a locator cycle (the key IS placed in the
    buckets; the caller rebuilds the locator).
    """
    params, scratch = st.params, st.scratch
    skeys, sentry, values, fps = st.skeys, st.sentry, st.values, st.fps
    wide = params[P_VALUE_BITS] == 64
    fp_bits = np.int64(params[P_FP_BITS])
    value_words = 2 if wide else 1
    for i in range(d):  # the rewrites below touch these lines; start the misses together
        x = np.int64(scratch[PB + i])
        prefetch(sentry, x * 4)
        prefetch(values, x * 4 * value_words)
        prefetch(st.seeds, x)
        if fp_bits > 0:
            prefetch(fps, x * 4 * (fp_bits // 8))
    for i in range(1, d):
        src = np.int64(scratch[PD + i - 1])
        moved = sentry[src]
        scratch[_PM + i] = np.uint64(moved)
        scratch[_PK + i] = skeys[src]
        prefetch(st.half, 6 * moved)  # its edge record, read by set_bit after the rewrites
    meta = st.meta
    meta[M_FREE_E] -= 1
    e = st.free_entries[meta[M_FREE_E]]
    f = fingerprint(key, params[P_FP_SEED], params[P_FP_BITS])
    for i in range(d - 1, -1, -1):  # deepest first: a source bucket is rewritten after its key left
        x = np.int64(scratch[PB + i])
        sigma = np.int64(scratch[PS + i])
        drop = np.int64(scratch[PD + i]) if i < d - 1 else -1
        if i == 0:
            mk, me, mv, mf = key, e, v, f
        else:
            src = np.int64(scratch[PD + i - 1])
            mk, me = skeys[src], np.int64(sentry[src])
            mv, mf = get_value(values, wide, src), get_fp(fps, fp_bits, src)
        rewrite(st, x, sigma, drop, mk, me, mv, mf)
    meta[M_LIVE] += 1
    meta[M_KICKS] += d - 1
    for i in range(1, d):  # each moved key now sits in its other candidate: flip its bit
        want = want_bit(params, scratch[_PK + i], np.int64(scratch[PB + i]))
        set_bit(st, np.int64(scratch[_PM + i]), want)
    a, b = locator_cells(key, params[P_LOCATOR_SEED], params[P_MA], params[P_MB])
    return add_edge(st, e, a, b, want_bit(params, key, np.int64(scratch[PB])))


@inlined
def prefetch_moves(st: TableState, key: np.uint64, stage: Int) -> None:
    """For an insert that will need a cuckoo path (both roots full), prefetch what moving one of
    the roots' 8 keys reads: stage 1 their edge records, stage 2 (an op later, once the records
    are in) their endpoints' list heads. Speculative (one key of 8 moves, if any); no effect on
    results. Needs the roots' key and entry lines already in cache (``prefetch_op``)."""
    b0, b1 = bucket_pair(key, st.params[P_BUCKET_SEED], st.params[P_BUCKETS])
    if not (is_full(st.bfull, b0) and is_full(st.bfull, b1)) or find(st.skeys, key, b0, b1) >= 0:
        return
    for r in range(2):
        b = b0 if r == 0 else b1
        for s in range(4):
            e = st.sentry[b * 4 + s]
            if stage == 1:
                prefetch(st.half, 6 * e)
            else:
                prefetch(st.head, st.half[6 * e + 2])
                prefetch(st.head, st.half[6 * e + 5])


@inlined
def prefetch_op(st: TableState, key: np.uint64) -> None:
    """Prefetch what an op on ``key`` touches first: both buckets, the locator cells' lists."""
    params, skeys, sentry, fps = st.params, st.skeys, st.sentry, st.fps
    b0, b1 = bucket_pair(key, params[P_BUCKET_SEED], params[P_BUCKETS])
    a, b = locator_cells(key, params[P_LOCATOR_SEED], params[P_MA], params[P_MB])
    value_words = 2 if params[P_VALUE_BITS] == 64 else 1
    prefetch(skeys, b0 * 4)
    prefetch(skeys, b1 * 4)
    prefetch(sentry, b0 * 4)
    prefetch(sentry, b1 * 4)
    prefetch(st.values, b0 * 4 * value_words)
    prefetch(st.seeds, b0)
    if fps.shape[0] > 0:
        prefetch(fps, b0 * 4 * (fps.shape[0] // skeys.shape[0]))
    prefetch(st.head, a)
    prefetch(st.head, b)
    prefetch(st.locator, a >> 6)
    prefetch(st.locator, b >> 6)
