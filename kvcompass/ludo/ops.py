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
from kvcompass.ludo.othello import add_edge, rebuild, remove_edge, set_bit, set_endpoints, want_bit
from kvcompass.ludo.state import M_FREE_E, M_KICKS, M_LIVE, M_MAXLIVE, TableState

OK, FULL, NO_PLACE, LOCATOR = 0, 1, 2, 3
_PM = 56  # scratch[56:61): entry of the key entering path bucket i (i >= 1)


@njit(cache=True)
def remove_at(st: TableState, pos: Int) -> None:
    """Remove the key at slot ``pos``: empty slot (value 0), Othello edge gone, entry freed."""
    e = st.sentry[pos]
    st.sentry[pos] = -1
    st.skeys[pos] = 0
    put_value(st, pos, np.uint64(0))
    put_fp(st, pos, np.uint64(0))
    mark_bucket(st, pos >> 2)
    remove_edge(st, e)
    st.epos[e] = -1
    st.free_entries[st.meta[M_FREE_E]] = e
    st.meta[M_FREE_E] += 1
    st.meta[M_LIVE] -= 1


@njit(cache=True)
def insert(st: TableState, key: np.uint64, v: np.uint64, b0: Int, b1: Int) -> Int:
    """Place a new key (cuckoo path if needed), then register it in the Othello."""
    if st.meta[M_LIVE] >= st.meta[M_MAXLIVE]:
        return FULL
    d = plan_path(st, key, b0, b1)
    if d == 0:
        return NO_PLACE
    for i in range(1, d):
        st.scratch[_PM + i] = np.uint64(st.sentry[np.int64(st.scratch[PD + i - 1])])
    st.meta[M_FREE_E] -= 1
    e = st.free_entries[st.meta[M_FREE_E]]
    f = fingerprint(key, st.params[9], st.params[5])
    for i in range(d - 1, -1, -1):  # deepest first: a source bucket is rewritten after its key left
        x = np.int64(st.scratch[PB + i])
        sigma = np.int64(st.scratch[PS + i])
        drop = np.int64(st.scratch[PD + i]) if i < d - 1 else -1
        if i == 0:
            rewrite(st, x, sigma, drop, key, e, v, f)
        else:
            src = np.int64(st.scratch[PD + i - 1])
            rewrite(
                st,
                x,
                sigma,
                drop,
                st.skeys[src],
                st.sentry[src],
                get_value(st, src),
                get_fp(st, src),
            )
    st.meta[M_LIVE] += 1
    st.meta[M_KICKS] += d - 1
    for i in range(1, d):
        moved = np.int64(st.scratch[_PM + i])
        pos = st.epos[moved]
        set_bit(st, moved, want_bit(st, st.skeys[pos], pos))
    set_endpoints(st, e, key)
    if not add_edge(st, e, want_bit(st, key, st.epos[e])) and not rebuild(st):
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
    zero = np.uint64(0)
    for i in range(start, keys.shape[0]):
        key = keys[i]
        b0, b1 = bucket_pair(key, st.params[6], st.params[1])
        pos = find(st, key, b0, b1)
        cur = get_value(st, pos) if pos >= 0 else zero
        nv = (cur & ~clear_masks[i]) | set_bits[i]
        if pos >= 0:
            if nv == zero:
                remove_at(st, pos)
            elif nv != cur:
                put_value(st, pos, nv)
                mark_bucket(st, pos >> 2)
        elif nv != zero:
            status = insert(st, key, nv, b0, b1)
            if status != OK:
                return status, i
    return OK, keys.shape[0]


@njit(cache=True)
def clear_all(st: TableState, mask: np.uint64) -> None:
    """``v &= ~mask`` for every live key; keys whose value becomes 0 are removed."""
    for pos in range(st.sentry.shape[0]):
        if st.sentry[pos] < 0:
            continue
        cur = get_value(st, pos)
        nv = cur & ~mask
        if nv == np.uint64(0):
            remove_at(st, pos)
        elif nv != cur:
            put_value(st, pos, nv)
            mark_bucket(st, pos >> 2)


@njit(cache=True)
def get_batch(st: TableState, keys: NDArray[np.uint64], out: NDArray[np.uint64]) -> None:
    """Exact values (0 = absent) from the keyed side."""
    for i in range(keys.shape[0]):
        b0, b1 = bucket_pair(keys[i], st.params[6], st.params[1])
        pos = find(st, keys[i], b0, b1)
        out[i] = get_value(st, pos) if pos >= 0 else np.uint64(0)
