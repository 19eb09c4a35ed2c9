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

from kvcompass.ludo.cuckoo import bfs_path, find, get_value, mark_bucket, put_value, root_path
from kvcompass.ludo.hashing import Int, bucket_pair
from kvcompass.ludo.jit import inlined, kernel
from kvcompass.ludo.othello import rebuild
from kvcompass.ludo.params import P_BUCKET_SEED, P_BUCKETS, P_VALUE_BITS
from kvcompass.ludo.placement import place, prefetch_moves, prefetch_op, remove_at
from kvcompass.ludo.prefetch import prefetch
from kvcompass.ludo.state import EMPTY, M_LIVE, M_MAXLIVE, U32, U64, TableState, unpack

OK, FULL, NO_PLACE, LOCATOR = 0, 1, 2, 3
_ZERO = np.uint64(0)
AHEAD = 6  # operations between a prefetch and its use


@kernel
def update_batch(
    mem: U64,
    keys: U64,
    clear_masks: U64,
    set_bits: U64,
    start: Int,
    stop: Int,
) -> tuple[Int, Int]:
    """Apply ops ``start..stop-1`` in order; returns ``(status, stopping op index or stop)``.

    ``mem`` is ``TableState.mem``; the whole operation loop (``apply_ops``) is inlined here, so
    one call costs a few dozen instructions of entry however few ops it carries.
    """
    return apply_ops(unpack(mem), keys, clear_masks, set_bits, start, stop)


@inlined
def apply_ops(
    st: TableState,
    keys: U64,
    clear_masks: U64,
    set_bits: U64,
    start: Int,
    stop: Int,
) -> tuple[Int, Int]:
    """``update_batch`` over an unpacked state (inlined into its callers: no argument copies)."""
    params, meta, values, sentry = st.params, st.meta, st.values, st.sentry
    wide = params[P_VALUE_BITS] == 64
    value_words = 2 if wide else 1
    bucket_seed, n_buckets = params[P_BUCKET_SEED], params[P_BUCKETS]
    n = stop
    for i in range(start, n):
        if i + AHEAD < n:
            prefetch_op(st, keys[i + AHEAD])
        for stage in range(1, 3):  # ops i+2 then i+1: the locator lines a cuckoo move reads
            j = i + 3 - stage
            if j < n and set_bits[j] != _ZERO:
                prefetch_moves(st, keys[j], stage)
        key = keys[i]
        b0, b1 = bucket_pair(key, bucket_seed, n_buckets)
        # Both candidates' value, entry and dirty-flag lines, before find() waits for the keys:
        # a lone op (nothing prefetched ahead) then pays one round of cache misses, not two.
        # Already-cached lines (the batched path) make these near free.
        for b in (b0, b1):
            prefetch(values, b * 4 * value_words)
            prefetch(sentry, b * 4)
            prefetch(st.bdirty, b)
        pos = find(st.skeys, key, b0, b1)
        cur = get_value(values, wide, pos) if pos >= 0 else _ZERO
        nv = (cur & ~clear_masks[i]) | set_bits[i]
        if pos >= 0:
            if nv == _ZERO:
                remove_at(st, pos)
            elif nv != cur:
                put_value(values, wide, pos, nv)
                mark_bucket(st, pos >> 2)
        elif nv != _ZERO:
            if meta[M_LIVE] >= meta[M_MAXLIVE]:
                return FULL, i
            d = root_path(st, key, b0, b1)
            if d == 0:
                d = bfs_path(st, key, b0, b1)
                if d == 0:
                    return NO_PLACE, i
            if not place(st, key, nv, d) and not rebuild(st.mem):
                return LOCATOR, i
    return OK, n


@kernel
def clear_all(mem: U64, mask: np.uint64) -> None:
    """``v &= ~mask`` for every live key; keys whose value becomes 0 are removed."""
    st = unpack(mem)
    skeys, values = st.skeys, st.values
    wide = st.params[P_VALUE_BITS] == 64
    for pos in range(skeys.shape[0]):
        if skeys[pos] == EMPTY:
            continue
        cur = get_value(values, wide, pos)
        nv = cur & ~mask
        if nv == _ZERO:
            remove_at(st, pos)
        elif nv != cur:
            put_value(values, wide, pos, nv)
            mark_bucket(st, pos >> 2)


@kernel
def get_batch(params: U64, skeys: U64, values: U32, keys: U64, out: U64) -> None:
    """Exact values (0 = absent) from the keyed side (three arrays: cheap to dispatch)."""
    wide = params[P_VALUE_BITS] == 64
    for i in range(keys.shape[0]):
        b0, b1 = bucket_pair(keys[i], params[P_BUCKET_SEED], params[P_BUCKETS])
        pos = find(skeys, keys[i], b0, b1)
        out[i] = get_value(values, wide, pos) if pos >= 0 else _ZERO
