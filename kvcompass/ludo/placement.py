"""Executing one removal or one planned insert over explicit arrays (numba kernels).

Owns: ``remove_at`` (empty a slot, unlink the key's Othello edge, free its entry), ``place``
(move keys along a path planned by ``cuckoo``, deepest first, re-seeding each bucket, flipping
the locator bits of moved keys, then adding the new key's edge) and ``prefetch_op`` (what an
operation on a key will touch first). Must not: decide what to do with a key (``ops.py`` does)
or grow the table.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

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
from kvcompass.ludo.prefetch import prefetch
from kvcompass.ludo.state import EMPTY, M_FREE_E, M_KICKS, M_LIVE

_ZERO = np.uint64(0)
_PM = 56  # scratch[56:61): entry of the key entering path bucket i (i >= 1)
_PK = 64  # scratch[64:69): that key

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
U8 = NDArray[np.uint8]
U32 = NDArray[np.uint32]
U64 = NDArray[np.uint64]


@inlined
def remove_at(
    skeys: U64,
    sentry: I32,
    values: U32,
    fps: U8,
    bdirty: U8,
    blist: I32,
    meta: I64,
    free_entries: I32,
    head: I32,
    half: I32,
    bfull: U64,
    wide: bool,
    fb: Int,
    pos: Int,
) -> None:
    """Remove the key at slot ``pos``: empty slot (value 0), Othello edge gone, entry freed."""
    set_full(bfull, pos >> 2, False)
    e = sentry[pos]
    sentry[pos] = -1
    skeys[pos] = EMPTY
    put_value(values, wide, pos, _ZERO)
    put_fp(fps, fb, pos, _ZERO)
    mark_bucket(bdirty, blist, meta, pos >> 2)
    remove_edge(head, half, e)
    free_entries[meta[M_FREE_E]] = e
    meta[M_FREE_E] += 1
    meta[M_LIVE] -= 1


@inlined
def place(
    params: U64,
    skeys: U64,
    sentry: I32,
    values: U32,
    fps: U8,
    seeds: U8,
    scratch: U64,
    bdirty: U8,
    blist: I32,
    meta: I64,
    free_entries: I32,
    loc: U64,
    head: I32,
    half: I32,
    wdirty: U8,
    wlist: I32,
    stack: I32,
    via: I32,
    seen: I32,
    bfull: U64,
    key: np.uint64,
    v: np.uint64,
    d: Int,
) -> bool:
    """Move keys along the planned path (deepest first), place ``key``, fix the Othello.

    Returns False if the new key's edge would close a locator cycle (the key IS placed in the
    buckets; the caller rebuilds the locator).
    """
    wide = params[4] == 64
    fb = np.int64(params[5])
    slot_seed = params[8]
    vw = 2 if wide else 1
    for i in range(d):  # the rewrites below touch these lines; start the misses together
        x = np.int64(scratch[PB + i])
        prefetch(sentry, x * 4)
        prefetch(values, x * 4 * vw)
        prefetch(seeds, x)
        if fb > 0:
            prefetch(fps, x * 4 * (fb // 8))
    for i in range(1, d):
        src = np.int64(scratch[PD + i - 1])
        moved = sentry[src]
        scratch[_PM + i] = np.uint64(moved)
        scratch[_PK + i] = skeys[src]
        prefetch(half, 6 * moved)  # its edge record, read by set_bit after the rewrites
    meta[M_FREE_E] -= 1
    e = free_entries[meta[M_FREE_E]]
    f = fingerprint(key, params[9], params[5])
    for i in range(d - 1, -1, -1):  # deepest first: a source bucket is rewritten after its key left
        x = np.int64(scratch[PB + i])
        sigma = np.int64(scratch[PS + i])
        drop = np.int64(scratch[PD + i]) if i < d - 1 else -1
        if i == 0:
            mk, me, mv, mf = key, e, v, f
        else:
            src = np.int64(scratch[PD + i - 1])
            mk, me = skeys[src], np.int64(sentry[src])
            mv, mf = get_value(values, wide, src), get_fp(fps, fb, src)
        rewrite(
            skeys,
            sentry,
            values,
            fps,
            seeds,
            scratch,
            bdirty,
            blist,
            meta,
            bfull,
            wide,
            fb,
            slot_seed,
            x,
            sigma,
            drop,
            mk,
            me,
            mv,
            mf,
        )
    meta[M_LIVE] += 1
    meta[M_KICKS] += d - 1
    for i in range(1, d):  # each moved key now sits in its other candidate: flip its bit
        want = want_bit(params, scratch[_PK + i], np.int64(scratch[PB + i]))
        set_bit(
            loc,
            head,
            half,
            wdirty,
            wlist,
            meta,
            stack,
            via,
            seen,
            np.int64(scratch[_PM + i]),
            want,
        )
    a, b = locator_cells(key, params[7], params[2], params[3])
    want = want_bit(params, key, np.int64(scratch[PB]))
    return add_edge(loc, head, half, wdirty, wlist, meta, stack, via, seen, e, a, b, want)


@inlined
def prefetch_moves(
    params: U64,
    skeys: U64,
    sentry: I32,
    half: I32,
    head: I32,
    bfull: U64,
    key: np.uint64,
    stage: Int,
) -> None:
    """For an insert that will need a cuckoo path (both roots full), prefetch what moving one of
    the roots' 8 keys reads: stage 1 their edge records, stage 2 (an op later, once the records
    are in) their endpoints' list heads. Speculative (one key of 8 moves, if any); no effect on
    results. Needs the roots' key and entry lines already in cache (``prefetch_op``)."""
    b0, b1 = bucket_pair(key, params[6], params[1])
    if not (is_full(bfull, b0) and is_full(bfull, b1)) or find(skeys, key, b0, b1) >= 0:
        return
    for r in range(2):
        b = b0 if r == 0 else b1
        for s in range(4):
            e = sentry[b * 4 + s]
            if stage == 1:
                prefetch(half, 6 * e)
            else:
                prefetch(head, half[6 * e + 2])
                prefetch(head, half[6 * e + 5])


@inlined
def prefetch_op(
    params: U64,
    skeys: U64,
    sentry: I32,
    values: U32,
    fps: U8,
    seeds: U8,
    loc: U64,
    head: I32,
    key: np.uint64,
) -> None:
    """Prefetch what an op on ``key`` touches first: both buckets, the locator cells' lists."""
    b0, b1 = bucket_pair(key, params[6], params[1])
    a, b = locator_cells(key, params[7], params[2], params[3])
    vw = 2 if params[4] == 64 else 1
    prefetch(skeys, b0 * 4)
    prefetch(skeys, b1 * 4)
    prefetch(sentry, b0 * 4)
    prefetch(sentry, b1 * 4)
    prefetch(values, b0 * 4 * vw)
    prefetch(seeds, b0)
    if fps.shape[0] > 0:
        prefetch(fps, b0 * 4 * (fps.shape[0] // skeys.shape[0]))
    prefetch(head, a)
    prefetch(head, b)
    prefetch(loc, a >> 6)
    prefetch(loc, b >> 6)
