"""Batched maintenance operations over a ``TableState``: update, clear_bits, get (numba).

Owns: the per-key semantics of ``LudoTable.update`` (read-modify-write of the value; 0 removes,
absent + non-zero inserts) and of ``clear_bits``, keeping buckets and Othello in step. Must not:
grow the table or build patches (``table.py`` does, from the dirty lists these kernels fill).

Status codes returned with the index of the op that stopped the batch:
``OK`` (all done), ``FULL`` (the insert would pass the growth threshold; op not applied),
``NO_PLACE`` (no cuckoo path or no bucket seed; op not applied), ``LOCATOR`` (no acyclic locator
after the rebuild tries; the op IS applied to the buckets, the locator is inconsistent).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kvcompass.ludo.cuckoo import bfs_path, find, get_value, mark_bucket, put_value, root_path
from kvcompass.ludo.hashing import Int, bucket_pair
from kvcompass.ludo.jit import kernel
from kvcompass.ludo.othello import rebuild_arrays
from kvcompass.ludo.placement import place, prefetch_op, remove_at
from kvcompass.ludo.state import EMPTY, M_LIVE, M_MAXLIVE, TableState

OK, FULL, NO_PLACE, LOCATOR = 0, 1, 2, 3
_ZERO = np.uint64(0)
AHEAD = 6  # operations between a prefetch and its use

I32 = NDArray[np.int32]
I64 = NDArray[np.int64]
U8 = NDArray[np.uint8]
U32 = NDArray[np.uint32]
U64 = NDArray[np.uint64]


@kernel
def update_batch(
    st: TableState,
    keys: U64,
    clear_masks: U64,
    set_bits: U64,
    start: Int,
    stop: Int,
) -> tuple[Int, Int]:
    """Apply ops ``start..stop-1`` in order; returns ``(status, stopping op index or stop)``.

    Reads the arrays out of ``st`` once and hands them to ``apply_ops`` (reading a tuple member
    costs a reference-count update; per-op callers should unpack once and call ``apply_ops``).
    """
    return apply_ops(
        st.params,
        st.skeys,
        st.sentry,
        st.values,
        st.fps,
        st.seeds,
        st.scratch,
        st.bdirty,
        st.blist,
        st.meta,
        st.free_entries,
        st.locator,
        st.head,
        st.half,
        st.wdirty,
        st.wlist,
        st.stack,
        st.via,
        st.seen,
        st.mark,
        st.qbucket,
        st.qparent,
        st.qslot,
        st.qdepth,
        st.qalt,
        st.rng,
        keys,
        clear_masks,
        set_bits,
        start,
        stop,
    )


@kernel
def apply_ops(
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
    mark: I32,
    qbucket: I32,
    qparent: I32,
    qslot: I32,
    qdepth: I32,
    qalt: I32,
    rng: U64,
    keys: U64,
    clear_masks: U64,
    set_bits: U64,
    start: Int,
    stop: Int,
) -> tuple[Int, Int]:
    """``update_batch`` over explicit arrays (the ``TableState`` fields of the same names)."""
    wide = params[4] == 64
    fb = np.int64(params[5])
    bucket_seed, n_buckets, slot_seed = params[6], params[1], params[8]
    n = stop
    for i in range(start, n):
        if i + AHEAD < n:
            prefetch_op(params, skeys, sentry, values, fps, seeds, loc, head, keys[i + AHEAD])
        key = keys[i]
        b0, b1 = bucket_pair(key, bucket_seed, n_buckets)
        pos = find(skeys, key, b0, b1)
        cur = get_value(values, wide, pos) if pos >= 0 else _ZERO
        nv = (cur & ~clear_masks[i]) | set_bits[i]
        if pos >= 0:
            if nv == _ZERO:
                remove_at(
                    skeys,
                    sentry,
                    values,
                    fps,
                    bdirty,
                    blist,
                    meta,
                    free_entries,
                    head,
                    half,
                    wide,
                    fb,
                    pos,
                )
            elif nv != cur:
                put_value(values, wide, pos, nv)
                mark_bucket(bdirty, blist, meta, pos >> 2)
        elif nv != _ZERO:
            if meta[M_LIVE] >= meta[M_MAXLIVE]:
                return FULL, i
            d = root_path(skeys, seeds, scratch, slot_seed, key, b0, b1)
            if d == 0:
                d = bfs_path(
                    params,
                    skeys,
                    seeds,
                    scratch,
                    meta,
                    mark,
                    qbucket,
                    qparent,
                    qslot,
                    qdepth,
                    qalt,
                    key,
                    b0,
                    b1,
                )
                if d == 0:
                    return NO_PLACE, i
            if not place(
                params,
                skeys,
                sentry,
                values,
                fps,
                seeds,
                scratch,
                bdirty,
                blist,
                meta,
                free_entries,
                loc,
                head,
                half,
                wdirty,
                wlist,
                stack,
                via,
                seen,
                key,
                nv,
                d,
            ) and not rebuild_arrays(
                params, meta, loc, head, half, skeys, sentry, wdirty, wlist, stack, via, seen, rng
            ):
                return LOCATOR, i
    return OK, n


@kernel
def clear_all(st: TableState, mask: np.uint64) -> None:
    """``v &= ~mask`` for every live key; keys whose value becomes 0 are removed."""
    params, skeys, sentry, values, fps = st.params, st.skeys, st.sentry, st.values, st.fps
    bdirty, blist, meta, free_entries = st.bdirty, st.blist, st.meta, st.free_entries
    head, half = st.head, st.half
    wide = params[4] == 64
    fb = np.int64(params[5])
    for pos in range(skeys.shape[0]):
        if skeys[pos] == EMPTY:
            continue
        cur = get_value(values, wide, pos)
        nv = cur & ~mask
        if nv == _ZERO:
            remove_at(
                skeys,
                sentry,
                values,
                fps,
                bdirty,
                blist,
                meta,
                free_entries,
                head,
                half,
                wide,
                fb,
                pos,
            )
        elif nv != cur:
            put_value(values, wide, pos, nv)
            mark_bucket(bdirty, blist, meta, pos >> 2)


@kernel
def get_batch(params: U64, skeys: U64, values: U32, keys: U64, out: U64) -> None:
    """Exact values (0 = absent) from the keyed side (three arrays: cheap to dispatch)."""
    wide = params[4] == 64
    for i in range(keys.shape[0]):
        b0, b1 = bucket_pair(keys[i], params[6], params[1])
        pos = find(skeys, keys[i], b0, b1)
        out[i] = get_value(values, wide, pos) if pos >= 0 else _ZERO
