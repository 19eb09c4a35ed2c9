"""Numba kernels of the worker caches: every worker's two-tier chunk cache in flat arrays.

The same semantics as the readable ``sim.cluster.cache.PrefixCache`` (its docstring has the
eviction keys and the prefix-closure argument; the tests compare the two), laid out for speed:

* node pool: ``chunk[n]``, ``worker[n]``, ``tier[n]`` (1 VRAM, 2 DRAM), eviction key
  ``k1[n], k2[n]`` (compared lexicographically; LRU/FIFO: k1 = tick<<20 | (2^20-1-depth), k2 = 0;
  LFU: k1 = touches, k2 = tick<<20 | (2^20-1-depth)), ``depth[n]``, ``owner[n]`` (the request
  whose keys name the chunk), ``touch[n]``, ``hpos[n]`` (position in its heap); a free stack;
* an open-addressing hash (linear probing, backward-shift deletion) from (chunk, worker) to node;
* one indexed binary min-heap per (worker, tier): ``heap[w, t, :size[w, t]]``.

Kernels are private and trust their input; ``sim.cluster.store.CacheStore`` validates.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_MAXD = (1 << 20) - 1
VRAM = 1
DRAM = 2
# change kinds written to the out buffers
STORED = 0
PROMOTED = 1
DEMOTED = 2
REMOVED = 3


@njit(cache=True)
def _hash(chunk, worker, mask):  # type: ignore[no-untyped-def]
    x = np.uint64(chunk) * np.uint64(0x9E3779B97F4A7C15)
    x ^= np.uint64(worker + 1) * np.uint64(0xC2B2AE3D27D4EB4F)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(32)
    return np.int64(x & np.uint64(mask))


@njit(cache=True)
def _find(ht, n_chunk, n_worker, chunk, worker, mask):  # type: ignore[no-untyped-def]
    i = _hash(chunk, worker, mask)
    while True:
        nd = ht[i]
        if nd < 0:
            return -1
        if n_chunk[nd] == chunk and n_worker[nd] == worker:
            return nd
        i = (i + 1) & mask


@njit(cache=True)
def _ht_insert(ht, n_chunk, n_worker, nd, mask):  # type: ignore[no-untyped-def]
    i = _hash(n_chunk[nd], n_worker[nd], mask)
    while ht[i] >= 0:
        i = (i + 1) & mask
    ht[i] = nd


@njit(cache=True)
def _ht_delete(ht, n_chunk, n_worker, nd, mask):  # type: ignore[no-untyped-def]
    i = _hash(n_chunk[nd], n_worker[nd], mask)
    while ht[i] != nd:
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        e = ht[j]
        if e < 0:
            break
        k = _hash(n_chunk[e], n_worker[e], mask)
        # e may move back to i only if its home k is not cyclically within (i, j]
        stays = (i < k <= j) if i <= j else (k > i or k <= j)
        if not stays:
            ht[i] = e
            i = j
    ht[i] = -1


@njit(cache=True)
def _less(a, b, k1, k2):  # type: ignore[no-untyped-def]
    return k1[a] < k1[b] or (k1[a] == k1[b] and k2[a] < k2[b])


@njit(cache=True)
def _sift_up(heap, w, t, pos, hpos, k1, k2):  # type: ignore[no-untyped-def]
    nd = heap[w, t, pos]
    while pos > 0:
        parent = (pos - 1) >> 1
        p = heap[w, t, parent]
        if _less(nd, p, k1, k2):
            heap[w, t, pos] = p
            hpos[p] = pos
            pos = parent
        else:
            break
    heap[w, t, pos] = nd
    hpos[nd] = pos


@njit(cache=True)
def _sift_down(heap, size, w, t, pos, hpos, k1, k2):  # type: ignore[no-untyped-def]
    n = size[w, t]
    nd = heap[w, t, pos]
    while True:
        c = 2 * pos + 1
        if c >= n:
            break
        if c + 1 < n and _less(heap[w, t, c + 1], heap[w, t, c], k1, k2):
            c += 1
        ch = heap[w, t, c]
        if _less(ch, nd, k1, k2):
            heap[w, t, pos] = ch
            hpos[ch] = pos
            pos = c
        else:
            break
    heap[w, t, pos] = nd
    hpos[nd] = pos


@njit(cache=True)
def _push(heap, size, w, t, nd, hpos, k1, k2):  # type: ignore[no-untyped-def]
    pos = size[w, t]
    size[w, t] = pos + 1
    heap[w, t, pos] = nd
    _sift_up(heap, w, t, pos, hpos, k1, k2)


@njit(cache=True)
def _remove_at(heap, size, w, t, pos, hpos, k1, k2):  # type: ignore[no-untyped-def]
    last = size[w, t] - 1
    size[w, t] = last
    if pos == last:
        return
    nd = heap[w, t, last]
    heap[w, t, pos] = nd
    hpos[nd] = pos
    _sift_down(heap, size, w, t, pos, hpos, k1, k2)
    _sift_up(heap, w, t, hpos[nd], hpos, k1, k2)


@njit(cache=True)
def _match(ht, n_chunk, n_worker, tier, worker, chunks, mask):  # type: ignore[no-untyped-def]
    """(held chunks, of which in DRAM) of the longest held prefix (binary search)."""
    lo = 0
    hi = chunks.shape[0]
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _find(ht, n_chunk, n_worker, chunks[mid - 1], worker, mask) >= 0:
            lo = mid
        else:
            hi = mid - 1
    if lo == 0:
        return 0, 0
    a = 0
    b = lo
    while a < b:
        mid = (a + b) >> 1
        if tier[_find(ht, n_chunk, n_worker, chunks[mid], worker, mask)] == DRAM:
            b = mid
        else:
            a = mid + 1
    return lo, lo - a


@njit(cache=True)
def _match_all(ht, n_chunk, n_worker, tier, n_workers, chunks, mask, out_m, out_dram):  # type: ignore[no-untyped-def]
    for w in range(n_workers):
        m, d = _match(ht, n_chunk, n_worker, tier, w, chunks, mask)
        out_m[w] = m
        out_dram[w] = d


@njit(cache=True)
def _serve(  # type: ignore[no-untyped-def]
    ht,
    mask,
    n_chunk,
    n_worker,
    tier,
    k1,
    k2,
    depth,
    owner,
    touch,
    hpos,
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
    m, m_dram = _match(ht, n_chunk, n_worker, tier, w, chunks, mask)
    tick[w] += 1
    tk = tick[w]
    n_out = 0
    # FIFO refreshes the path only when it grows (leaf-first FIFO, see PrefixCache).
    fifo = fifo and chunks.shape[0] == m
    for d in range(m):
        nd = _find(ht, n_chunk, n_worker, chunks[d], w, mask)
        touch[nd] += 1
        if not fifo:
            key = (tk << 20) | (_MAXD - d)
            if lfu:
                k1[nd] = touch[nd]
                k2[nd] = key
            else:
                k1[nd] = key
        t = tier[nd] - 1
        if tier[nd] == DRAM and promote:
            _remove_at(heap, size, w, 1, hpos[nd], hpos, k1, k2)
            tier[nd] = VRAM
            count[w, 1] -= 1
            count[w, 0] += 1
            _push(heap, size, w, 0, nd, hpos, k1, k2)
            o_kind[n_out] = PROMOTED
            o_chunk[n_out] = chunks[d]
            o_depth[n_out] = d
            o_owner[n_out] = owner[nd]
            n_out += 1
        elif not fifo:
            _sift_down(heap, size, w, t, hpos[nd], hpos, k1, k2)
    nt = new_tier - 1
    for d in range(m, chunks.shape[0]):
        n_free[0] -= 1
        nd = free[n_free[0]]
        n_chunk[nd] = chunks[d]
        n_worker[nd] = w
        tier[nd] = new_tier
        depth[nd] = d
        owner[nd] = req
        touch[nd] = 1
        key = (tk << 20) | (_MAXD - d)
        if lfu:
            k1[nd] = 1
            k2[nd] = key
        else:
            k1[nd] = key
            k2[nd] = 0
        _ht_insert(ht, n_chunk, n_worker, nd, mask)
        count[w, nt] += 1
        _push(heap, size, w, nt, nd, hpos, k1, k2)
        o_kind[n_out] = STORED
        o_chunk[n_out] = chunks[d]
        o_depth[n_out] = d
        o_owner[n_out] = req
        n_out += 1
    while count[w, 0] > cap[0]:
        nd = heap[w, 0, 0]
        _remove_at(heap, size, w, 0, 0, hpos, k1, k2)
        count[w, 0] -= 1
        if cap[1] > 0:
            tier[nd] = DRAM
            count[w, 1] += 1
            _push(heap, size, w, 1, nd, hpos, k1, k2)
            o_kind[n_out] = DEMOTED
        else:
            _ht_delete(ht, n_chunk, n_worker, nd, mask)
            free[n_free[0]] = nd
            n_free[0] += 1
            o_kind[n_out] = REMOVED
        o_chunk[n_out] = n_chunk[nd]
        o_depth[n_out] = depth[nd]
        o_owner[n_out] = owner[nd]
        n_out += 1
    while count[w, 1] > cap[1]:
        nd = heap[w, 1, 0]
        _remove_at(heap, size, w, 1, 0, hpos, k1, k2)
        count[w, 1] -= 1
        _ht_delete(ht, n_chunk, n_worker, nd, mask)
        free[n_free[0]] = nd
        n_free[0] += 1
        o_kind[n_out] = REMOVED
        o_chunk[n_out] = n_chunk[nd]
        o_depth[n_out] = depth[nd]
        o_owner[n_out] = owner[nd]
        n_out += 1
    return m, m_dram, n_out
