"""Numba kernels of ``HolderHistory``: chunk -> holder bitmask with a flip log, in flat arrays.

Same semantics as the readable ``tests/naive_sim.py::HolderHistoryTwin`` (the tests compare
them), laid out for speed:

* table: open addressing with linear probing over ``keys[cap]`` / ``used[cap]``, holder bits in
  ``masks[cap, n_words]`` (bit w of word w // 64), and ``last[cap]``, the sequence number of the
  chunk's latest flip (-1: none). Entries are never deleted in place (a chunk nobody holds any
  more may still be needed to read the past); the wrapper rebuilds the table, dropping entries
  with no holder and no flip inside the horizon, when it fills.
* flip log: a ring of ``F`` slots indexed by ``seq % F``: time ``f_t``, worker ``f_w``, the
  chunk's previous flip ``f_prev`` (a per-chunk chain backwards in time) and ``f_seq`` (the
  sequence number written there, to detect an overwritten slot). ``meta[0]`` = entries used,
  ``meta[1]`` = next sequence number.

Reading as of a past time walks a chunk's chain from its latest flip and undoes (XOR) every flip
later than the cutoff of the flipping worker's region, stopping at the first flip older than
every cutoff. Kernels are private and trust their input; ``HolderHistory`` validates and sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from kvcompass.mix import finalize


@njit(cache=True)
def _slot(key: int, cap: int) -> int:
    return int(np.int64(finalize(np.uint64(key)) & np.uint64(cap - 1)))


@njit(cache=True)
def _find(keys: Any, used: Any, key: int) -> int:
    """Slot of ``key``, or -(empty slot + 1) where it would go."""
    cap = keys.shape[0]
    i = _slot(key, cap)
    while used[i]:
        if keys[i] == key:
            return i
        i = (i + 1) & (cap - 1)
    return -(i + 1)


@njit(cache=True)
def _apply(
    keys: Any,
    used: Any,
    masks: Any,
    last: Any,
    f_t: Any,
    f_w: Any,
    f_prev: Any,
    f_seq: Any,
    meta: Any,
    worker: int,
    t: float,
    stored: Any,
    removed: Any,
    keep: bool,
) -> int:
    """Set/clear ``worker``'s bit for each chunk; log real transitions; return flips made."""
    word = worker >> 6
    bit = np.uint64(1) << np.uint64(worker & 63)
    n_ring = f_t.shape[0]
    flips = 0
    for k in range(stored.shape[0] + removed.shape[0]):
        add = k < stored.shape[0]
        key = stored[k] if add else removed[k - stored.shape[0]]
        i = _find(keys, used, key)
        if i < 0:
            if not add:
                continue
            i = -i - 1
            used[i] = 1
            keys[i] = key
            masks[i, :] = 0
            last[i] = -1
            meta[0] += 1
        held = (masks[i, word] & bit) != 0
        if held == add:
            continue
        masks[i, word] ^= bit
        flips += 1
        if keep:
            s = meta[1]
            j = s % n_ring
            f_t[j] = t
            f_w[j] = worker
            f_prev[j] = last[i]
            f_seq[j] = s
            last[i] = s
            meta[1] = s + 1
    return flips


@njit(cache=True)
def _read(
    i: int,
    masks: Any,
    last: Any,
    f_t: Any,
    f_w: Any,
    f_prev: Any,
    f_seq: Any,
    seq_next: int,
    region: Any,
    cutoff: Any,
    min_cut: float,
    out: Any,
) -> None:
    """Holder words of slot ``i`` as of the per-region cutoffs, into ``out``."""
    out[:] = masks[i, :]
    n_ring = f_t.shape[0]
    s = last[i]
    while s >= 0 and s >= seq_next - n_ring:
        j = s % n_ring
        if f_seq[j] != s:
            break
        t = f_t[j]
        if t <= min_cut:
            break
        w = f_w[j]
        if t > cutoff[region[w]]:
            out[w >> 6] ^= np.uint64(1) << np.uint64(w & 63)
        s = f_prev[j]


@njit(cache=True)
def _match(
    keys: Any,
    used: Any,
    masks: Any,
    last: Any,
    f_t: Any,
    f_w: Any,
    f_prev: Any,
    f_seq: Any,
    meta: Any,
    region: Any,
    nodes: Any,
    allowed: Any,
    cutoff: Any,
    live: bool,
    out: Any,
) -> int:
    """Leading chunks of ``nodes`` each allowed worker holds, into ``out``; the longest."""
    n_words = masks.shape[1]
    alive = allowed.copy()
    cur = np.empty(n_words, np.uint64)
    min_cut = np.inf
    if not live:
        for r in range(cutoff.shape[0]):
            min_cut = min(min_cut, cutoff[r])
    depth = 0
    for node in nodes:
        i = _find(keys, used, node)
        if i < 0:
            cur[:] = 0
        elif live:
            cur[:] = masks[i, :]
        else:
            _read(i, masks, last, f_t, f_w, f_prev, f_seq, meta[1], region, cutoff, min_cut, cur)
        any_left = False
        for k in range(n_words):
            m = cur[k] & alive[k]
            dead = alive[k] & ~m
            if depth > 0:
                while dead:
                    low = dead & (~dead + np.uint64(1))
                    out[k * 64 + int(np.log2(np.float64(low)))] = depth
                    dead ^= low
            alive[k] = m
            if m:
                any_left = True
        if not any_left:
            return depth
        depth += 1
    for k in range(n_words):
        rest = alive[k]
        while rest:
            low = rest & (~rest + np.uint64(1))
            out[k * 64 + int(np.log2(np.float64(low)))] = depth
            rest ^= low
    return depth


@njit(cache=True)
def _holders(
    keys: Any,
    used: Any,
    masks: Any,
    last: Any,
    f_t: Any,
    f_w: Any,
    f_prev: Any,
    f_seq: Any,
    meta: Any,
    region: Any,
    node: int,
    cutoff: Any,
    live: bool,
    out: Any,
) -> None:
    """Holder words of one chunk (now, or as of the cutoffs) into ``out``."""
    i = _find(keys, used, node)
    if i < 0:
        out[:] = 0
    elif live:
        out[:] = masks[i, :]
    else:
        min_cut = np.inf
        for r in range(cutoff.shape[0]):
            min_cut = min(min_cut, cutoff[r])
        _read(i, masks, last, f_t, f_w, f_prev, f_seq, meta[1], region, cutoff, min_cut, out)


@njit(cache=True)
def _keep(
    i: int, masks: Any, last: Any, f_t: Any, f_seq: Any, seq_next: int, oldest: float
) -> bool:
    """An entry survives a rebuild if someone holds it or it flipped at/after ``oldest``."""
    for k in range(masks.shape[1]):
        if masks[i, k]:
            return True
    s = last[i]
    n_ring = f_t.shape[0]
    if s >= 0 and s >= seq_next - n_ring:
        j = s % n_ring
        return bool(f_seq[j] == s and f_t[j] >= oldest)
    return False


@njit(cache=True)
def _count_live(
    used: Any, masks: Any, last: Any, f_t: Any, f_seq: Any, seq_next: int, oldest: float
) -> int:
    n = 0
    for i in range(used.shape[0]):
        if used[i] and _keep(i, masks, last, f_t, f_seq, seq_next, oldest):
            n += 1
    return n


@njit(cache=True)
def _rebuild(
    keys: Any,
    used: Any,
    masks: Any,
    last: Any,
    f_t: Any,
    f_seq: Any,
    seq_next: int,
    oldest: float,
    new_keys: Any,
    new_used: Any,
    new_masks: Any,
    new_last: Any,
) -> int:
    """Copy entries with a holder or a flip at/after ``oldest`` into the new table."""
    n = 0
    for i in range(keys.shape[0]):
        if not used[i] or not _keep(i, masks, last, f_t, f_seq, seq_next, oldest):
            continue
        p = -_find(new_keys, new_used, keys[i]) - 1
        new_used[p] = 1
        new_keys[p] = keys[i]
        new_masks[p, :] = masks[i, :]
        new_last[p] = last[i]
        n += 1
    return n
