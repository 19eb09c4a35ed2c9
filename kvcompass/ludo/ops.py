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
from numba import njit
from numpy.typing import NDArray

from kvcompass.ludo.cuckoo import (
    PB,
    PD,
    PS,
    find,
    get_fp,
    get_value,
    mark_bucket,
    plan_path,
    put_fp,
    put_value,
    rewrite,
)
from kvcompass.ludo.hashing import Int, bucket_pair, fingerprint
from kvcompass.ludo.othello import add_key, rebuild, remove_edge, set_bit, want_bit
from kvcompass.ludo.state import EMPTY, M_FREE_E, M_KICKS, M_LIVE, M_MAXLIVE, TableState

OK, FULL, NO_PLACE, LOCATOR = 0, 1, 2, 3
_ZERO = np.uint64(0)
_PM = 56  # scratch[56:61): entry of the key entering path bucket i (i >= 1)
_PK = 64  # scratch[64:69): that key


@njit(cache=True)
def remove_at(st: TableState, pos: Int) -> None:
    """Remove the key at slot ``pos``: empty slot (value 0), Othello edge gone, entry freed."""
    sentry = st.sentry
    skeys = st.skeys
    free_entries = st.free_entries
    meta = st.meta
    e = sentry[pos]
    sentry[pos] = -1
    skeys[pos] = EMPTY
    put_value(st, pos, _ZERO)
    put_fp(st, pos, _ZERO)
    mark_bucket(st, pos >> 2)
    remove_edge(st, e)
    free_entries[meta[M_FREE_E]] = e
    meta[M_FREE_E] += 1
    meta[M_LIVE] -= 1


@njit(cache=True)
def insert(st: TableState, key: np.uint64, v: np.uint64, b0: Int, b1: Int) -> Int:
    """Place a new key (cuckoo path if needed), then register it in the Othello."""
    meta = st.meta
    scratch = st.scratch
    skeys = st.skeys
    sentry = st.sentry
    params = st.params
    if meta[M_LIVE] >= meta[M_MAXLIVE]:
        return FULL
    d = plan_path(st, key, b0, b1)
    if d == 0:
        return NO_PLACE
    for i in range(1, d):
        src = np.int64(scratch[PD + i - 1])
        scratch[_PM + i] = np.uint64(sentry[src])
        scratch[_PK + i] = skeys[src]
    meta[M_FREE_E] -= 1
    e = st.free_entries[meta[M_FREE_E]]
    f = fingerprint(key, params[9], params[5])
    for i in range(d - 1, -1, -1):  # deepest first: a source bucket is rewritten after its key left
        x = np.int64(scratch[PB + i])
        sigma = np.int64(scratch[PS + i])
        drop = np.int64(scratch[PD + i]) if i < d - 1 else -1
        if i == 0:
            rewrite(st, x, sigma, drop, key, e, v, f)
        else:
            src = np.int64(scratch[PD + i - 1])
            moved_v = get_value(st, src)
            moved_f = get_fp(st, src)
            rewrite(st, x, sigma, drop, skeys[src], sentry[src], moved_v, moved_f)
    meta[M_LIVE] += 1
    meta[M_KICKS] += d - 1
    for i in range(1, d):  # each moved key now sits in its other candidate: flip its bit
        bucket = np.int64(scratch[PB + i])
        set_bit(st, np.int64(scratch[_PM + i]), want_bit(st, scratch[_PK + i], bucket))
    if not add_key(st, e, key, np.int64(scratch[PB])) and not rebuild(st):
        return LOCATOR
    return OK


@njit(cache=True)
def update_batch(
    st: TableState,
    keys: NDArray[np.uint64],
    clear_masks: NDArray[np.uint64],
    set_bits: NDArray[np.uint64],
    start: Int,
) -> tuple[Int, Int]:
    """Apply ops ``start..`` in order; returns ``(status, index of the stopping op or n)``."""
    params = st.params
    for i in range(start, keys.shape[0]):
        key = keys[i]
        b0, b1 = bucket_pair(key, params[6], params[1])
        pos = find(st, key, b0, b1)
        cur = get_value(st, pos) if pos >= 0 else _ZERO
        nv = (cur & ~clear_masks[i]) | set_bits[i]
        if pos >= 0:
            if nv == _ZERO:
                remove_at(st, pos)
            elif nv != cur:
                put_value(st, pos, nv)
                mark_bucket(st, pos >> 2)
        elif nv != _ZERO:
            status = insert(st, key, nv, b0, b1)
            if status != OK:
                return status, i
    return OK, keys.shape[0]


@njit(cache=True)
def clear_all(st: TableState, mask: np.uint64) -> None:
    """``v &= ~mask`` for every live key; keys whose value becomes 0 are removed."""
    skeys = st.skeys
    for pos in range(skeys.shape[0]):
        if skeys[pos] == EMPTY:
            continue
        cur = get_value(st, pos)
        nv = cur & ~mask
        if nv == _ZERO:
            remove_at(st, pos)
        elif nv != cur:
            put_value(st, pos, nv)
            mark_bucket(st, pos >> 2)


@njit(cache=True)
def get_batch(st: TableState, keys: NDArray[np.uint64], out: NDArray[np.uint64]) -> None:
    """Exact values (0 = absent) from the keyed side."""
    params = st.params
    for i in range(keys.shape[0]):
        b0, b1 = bucket_pair(keys[i], params[6], params[1])
        pos = find(st, keys[i], b0, b1)
        out[i] = get_value(st, pos) if pos >= 0 else _ZERO
