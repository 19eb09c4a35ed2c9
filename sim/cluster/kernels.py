"""Numba kernels of the worker caches: every worker's two-tier chunk cache in flat arrays.

The cache model of ``sim.cluster.store`` (its docstring has the eviction keys and the
prefix-closure argument; the tests compare the kernels with ``tests/naive_sim.py``'s readable
twin), laid out for speed:

* node pool: one 64-byte row per node, ``N[n, :]`` = chunk id, worker, tier (``Tier`` codes),
  eviction key k1, k2 (compared lexicographically; LRU/FIFO: k1 = tick<<20 | (2^20-1-depth),
  k2 = 0; LFU: k1 = touch count, k2 = tick<<20 | (2^20-1-depth)), depth, owner (the request whose
  keys name the chunk), position in its heap. One row = one cache line: the kernels are bound by
  random memory access, and a struct of arrays would cost one miss per field. A free stack.
* an open-addressing hash (linear probing, backward-shift deletion) from (chunk, worker) to node;
* one indexed binary min-heap per (worker, tier): ``heap[w, t, :size[w, t]]``.

Kernels are private and trust their input; ``sim.cluster.store.CacheStore`` validates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvcompass.mix import finalize
from kvcompass.types import Tier

_MAXD = (1 << 20) - 1
# columns of the node rows
C_CHUNK, C_WORKER, C_TIER, C_K1, C_K2, C_DEPTH, C_OWNER, C_HPOS = 0, 1, 2, 3, 4, 5, 6, 7
N_COLS = 8
# plain ints: numba freezes module globals into the kernels as compile-time constants
VRAM = int(Tier.VRAM)
DRAM = int(Tier.DRAM)
# change kinds written to the out buffers
STORED = 0
PROMOTED = 1
DEMOTED = 2
REMOVED = 3


@njit(cache=True)
def _hash(chunk, worker, mask):  # type: ignore[no-untyped-def]
    x = np.uint64(chunk) ^ (np.uint64(worker + 1) * np.uint64(0xC2B2AE3D27D4EB4F))
    return np.int64(finalize(x) & np.uint64(mask))


@njit(cache=True)
def _find(ht, N, chunk, worker, mask):  # type: ignore[no-untyped-def]
    i = _hash(chunk, worker, mask)
    while True:
        nd = ht[i]
        if nd < 0:
            return -1
        if N[nd, 0] == chunk and N[nd, 1] == worker:
            return nd
        i = (i + 1) & mask


@njit(cache=True)
def _ht_insert(ht, N, nd, mask):  # type: ignore[no-untyped-def]
    i = _hash(N[nd, 0], N[nd, 1], mask)
    while ht[i] >= 0:
        i = (i + 1) & mask
    ht[i] = nd


@njit(cache=True)
def _ht_rebuild(ht, N, live, mask):  # type: ignore[no-untyped-def]
    for i in range(live.shape[0]):
        _ht_insert(ht, N, live[i], mask)


@njit(cache=True)
def _ht_delete(ht, N, nd, mask):  # type: ignore[no-untyped-def]
    i = _hash(N[nd, 0], N[nd, 1], mask)
    while ht[i] != nd:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        e = ht[j]
        if e < 0:
            break
        k = _hash(N[e, 0], N[e, 1], mask)
        # e may move back to i only if its home k is not cyclically within (i, j]
        stays = (i < k <= j) if i <= j else (k > i or k <= j)
        if not stays:
            ht[i] = e
            i = j
    ht[i] = -1


@njit(cache=True)
def _less(a, b, N):  # type: ignore[no-untyped-def]
    return N[a, 3] < N[b, 3] or (N[a, 3] == N[b, 3] and N[a, 4] < N[b, 4])


@njit(cache=True)
def _sift_up(heap, w, t, pos, N):  # type: ignore[no-untyped-def]
    nd = heap[w, t, pos]
    while pos > 0:
        parent = (pos - 1) >> 1
        p = heap[w, t, parent]
        if _less(nd, p, N):
            heap[w, t, pos] = p
            N[p, 7] = pos
            pos = parent
        else:
            break
    heap[w, t, pos] = nd
    N[nd, 7] = pos


@njit(cache=True)
def _sift_down(heap, size, w, t, pos, N):  # type: ignore[no-untyped-def]
    n = size[w, t]
    nd = heap[w, t, pos]
    while True:
        c = 2 * pos + 1
        if c >= n:
            break
        if c + 1 < n and _less(heap[w, t, c + 1], heap[w, t, c], N):
            c += 1
        ch = heap[w, t, c]
        if _less(ch, nd, N):
            heap[w, t, pos] = ch
            N[ch, 7] = pos
            pos = c
        else:
            break
    heap[w, t, pos] = nd
    N[nd, 7] = pos


@njit(cache=True)
def _push(heap, size, w, t, nd, N):  # type: ignore[no-untyped-def]
    pos = size[w, t]
    size[w, t] = pos + 1
    heap[w, t, pos] = nd
    _sift_up(heap, w, t, pos, N)


@njit(cache=True)
def _remove_at(heap, size, w, t, pos, N):  # type: ignore[no-untyped-def]
    last = size[w, t] - 1
    size[w, t] = last
    if pos == last:
        return
    nd = heap[w, t, last]
    heap[w, t, pos] = nd
    N[nd, 7] = pos
    _sift_down(heap, size, w, t, pos, N)
    _sift_up(heap, w, t, N[nd, 7], N)


@njit(cache=True)
def _match(ht, N, worker, chunks, mask):  # type: ignore[no-untyped-def]
    """(held chunks, of which in DRAM) of the longest held prefix (binary search)."""
    lo = 0
    hi = chunks.shape[0]
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _find(ht, N, chunks[mid - 1], worker, mask) >= 0:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return 0, 0
    a = 0
    b = lo
    while a < b:
        mid = (a + b) >> 1
        if N[_find(ht, N, chunks[mid], worker, mask), 2] == DRAM:
            b = mid
        else:
            a = mid + 1
    return lo, lo - a


@njit(cache=True)
def _match_all(ht, N, n_workers, chunks, mask, out_m, out_dram):  # type: ignore[no-untyped-def]
    for w in range(n_workers):
        m, d = _match(ht, N, w, chunks, mask)
        out_m[w] = m
        out_dram[w] = d


@njit(cache=True)
def _serve(  # type: ignore[no-untyped-def]
    ht,
    mask,
    N,
    free,
    n_free,
    heap,
    size,
    count,
    cap,
    tick,
    worker,
    chunks,
    req,
    new_tier,
    promote,
    lfu,
    fifo,
    o_kind,
    o_chunk,
    o_depth,
    o_owner,
):
    """Reuse the held prefix (promote it if ``promote``), insert the rest into ``new_tier``,
    evict to capacity. Returns (held, held in DRAM, number of changes written)."""
    w = worker
    m, m_dram = _match(ht, N, w, chunks, mask)
    tick[w] += 1
    tk = tick[w]
    n_out = 0
    # FIFO refreshes the path only when it grows (leaf-first FIFO, see PrefixCache).
    fifo = fifo and chunks.shape[0] == m
    for d in range(m):
        nd = _find(ht, N, chunks[d], w, mask)
        if not fifo:
            key = (tk << 20) | (_MAXD - d)
            if lfu:
                N[nd, 3] += 1
                N[nd, 4] = key
            else:
                N[nd, 3] = key
        t = N[nd, 2] - 1
        if N[nd, 2] == DRAM and promote:
            _remove_at(heap, size, w, 1, N[nd, 7], N)
            N[nd, 2] = VRAM
            count[w, 1] -= 1
            count[w, 0] += 1
            _push(heap, size, w, 0, nd, N)
            o_kind[n_out] = PROMOTED
            o_chunk[n_out] = chunks[d]
            o_depth[n_out] = d
            o_owner[n_out] = N[nd, 6]
            n_out += 1
        elif not fifo:
            _sift_down(heap, size, w, t, N[nd, 7], N)
    nt = new_tier - 1
    for d in range(m, chunks.shape[0]):
        n_free[0] -= 1
        nd = free[n_free[0]]
        N[nd, 0] = chunks[d]
        N[nd, 1] = w
        N[nd, 2] = new_tier
        N[nd, 5] = d
        N[nd, 6] = req
        key = (tk << 20) | (_MAXD - d)
        if lfu:
            N[nd, 3] = 1
            N[nd, 4] = key
        else:
            N[nd, 3] = key
            N[nd, 4] = 0
        _ht_insert(ht, N, nd, mask)
        count[w, nt] += 1
        _push(heap, size, w, nt, nd, N)
        o_kind[n_out] = STORED
        o_chunk[n_out] = chunks[d]
        o_depth[n_out] = d
        o_owner[n_out] = req
        n_out += 1
    while count[w, 0] > cap[0]:
        nd = heap[w, 0, 0]
        _remove_at(heap, size, w, 0, 0, N)
        count[w, 0] -= 1
        if cap[1] > 0:
            N[nd, 2] = DRAM
            count[w, 1] += 1
            _push(heap, size, w, 1, nd, N)
            o_kind[n_out] = DEMOTED
        else:
            _ht_delete(ht, N, nd, mask)
            free[n_free[0]] = nd
            n_free[0] += 1
            o_kind[n_out] = REMOVED
        o_chunk[n_out] = N[nd, 0]
        o_depth[n_out] = N[nd, 5]
        o_owner[n_out] = N[nd, 6]
        n_out += 1
    while count[w, 1] > cap[1]:
        nd = heap[w, 1, 0]
        _remove_at(heap, size, w, 1, 0, N)
        count[w, 1] -= 1
        _ht_delete(ht, N, nd, mask)
        free[n_free[0]] = nd
        n_free[0] += 1
        o_kind[n_out] = REMOVED
        o_chunk[n_out] = N[nd, 0]
        o_depth[n_out] = N[nd, 5]
        o_owner[n_out] = N[nd, 6]
        n_out += 1
    return m, m_dram, n_out
