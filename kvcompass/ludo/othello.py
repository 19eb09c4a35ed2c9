"""Maintenance-side Othello (the 1-bit locator) over a ``TableState`` (numba kernels).

Owns: adding and removing key edges, changing a key's locator bit (half-tree flip), component
labels (a union-find forest kept as explicit labels: union relabels the SMALLER tree with the same
walk that flips it; a delete re-labels one side by a walk from its endpoint; label ids recycle),
and the full rebuild with a fresh locator seed when an insert would close a cycle. Must not: touch
buckets or decide growth (``ops.py`` does).

Invariant: the edges form a forest and for every live entry ``e``,
``cell[ea[e]] ^ cell[eb[e]] == 1`` iff the key sits in its bucket ``b1`` (and ``b0 != b1``).
Every changed cell marks its 64-bit word dirty (an image for the view).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvcompass.ludo.hashing import Int, bucket_pair, locator_cells, mix64
from kvcompass.ludo.state import M_ALLW, M_FREE_L, M_NW, M_REBUILDS, TableState

MAX_REBUILD_TRIES = 64
_ONE = np.uint64(1)
_S6 = np.uint64(6)
_M63 = np.uint64(63)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(inline="always", cache=True)
def cell(st: TableState, c: Int) -> np.uint64:
    cc = np.uint64(c)
    return np.uint64((st.locator[cc >> _S6] >> (cc & _M63)) & _ONE)


@njit(inline="always", cache=True)
def mark_word(st: TableState, w: Int) -> None:
    if st.wdirty[w] == 0:
        st.wdirty[w] = 1
        st.wlist[st.meta[M_NW]] = w
        st.meta[M_NW] += 1


@njit(inline="always", cache=True)
def flip_cell(st: TableState, c: Int) -> None:
    cc = np.uint64(c)
    w = np.int64(cc >> _S6)
    st.locator[w] ^= _ONE << (cc & _M63)
    mark_word(st, w)


@njit(cache=True)
def walk(st: TableState, start: Int, skip_edge: Int, new_label: Int, flip: bool) -> Int:
    """Visit the tree of ``start`` without crossing ``skip_edge``; relabel and/or flip each node.

    Returns the number of nodes visited. The graph is a forest, so remembering the edge each node
    was reached by is enough to never revisit a node.
    """
    top = 1
    st.stack[0] = start
    st.via[0] = skip_edge
    count = 0
    while top > 0:
        top -= 1
        node = st.stack[top]
        came = st.via[top]
        count += 1
        if new_label >= 0:
            st.comp[node] = new_label
        if flip:
            flip_cell(st, node)
        h = st.head[node]
        while h != -1:
            e = h >> 1
            if e != came:
                st.stack[top] = st.eb[e] if (h & 1) == 0 else st.ea[e]
                st.via[top] = e
                top += 1
            h = st.hnext[h]
    return count


@njit(inline="always", cache=True)
def _link(st: TableState, half: Int, node: Int) -> None:
    first = st.head[node]
    st.hnext[half] = first
    st.hprev[half] = -1
    if first != -1:
        st.hprev[first] = half
    st.head[node] = half


@njit(inline="always", cache=True)
def _unlink(st: TableState, half: Int, node: Int) -> None:
    nxt = st.hnext[half]
    prv = st.hprev[half]
    if prv == -1:
        st.head[node] = nxt
    else:
        st.hnext[prv] = nxt
    if nxt != -1:
        st.hprev[nxt] = prv


@njit(cache=True)
def add_edge(st: TableState, e: Int, want: Int) -> bool:
    """Add entry ``e``'s edge with locator bit ``want``; False (nothing changed) on a cycle."""
    u = st.ea[e]
    w = st.eb[e]
    cu = st.comp[u]
    cw = st.comp[w]
    if cu == cw:
        return False
    flip = (cell(st, u) ^ cell(st, w)) != np.uint64(want)
    if st.csize[cu] <= st.csize[cw]:
        walk(st, u, -1, cw, flip)
        st.csize[cw] += st.csize[cu]
        freed = cu
    else:
        walk(st, w, -1, cu, flip)
        st.csize[cu] += st.csize[cw]
        freed = cw
    st.free_labels[st.meta[M_FREE_L]] = freed
    st.meta[M_FREE_L] += 1
    _link(st, 2 * e, u)
    _link(st, 2 * e + 1, w)
    return True


@njit(cache=True)
def remove_edge(st: TableState, e: Int) -> None:
    """Remove entry ``e``'s edge; cells are unchanged, the tree splits in two labels."""
    u = st.ea[e]
    w = st.eb[e]
    _unlink(st, 2 * e, u)
    _unlink(st, 2 * e + 1, w)
    old = st.comp[u]
    st.meta[M_FREE_L] -= 1
    fresh = st.free_labels[st.meta[M_FREE_L]]
    moved = walk(st, u, -1, fresh, False)
    st.csize[fresh] = moved
    st.csize[old] -= moved


@njit(cache=True)
def set_bit(st: TableState, e: Int, want: Int) -> None:
    """Make entry ``e``'s locator bit ``want`` by flipping the half tree on its ``ea`` side."""
    u = st.ea[e]
    if (cell(st, u) ^ cell(st, st.eb[e])) != np.uint64(want):
        walk(st, u, e, -1, True)


@njit(inline="always", cache=True)
def want_bit(st: TableState, key: np.uint64, pos: Int) -> Int:
    """Locator bit a key at slot ``pos`` needs: 1 iff its bucket is ``b1`` (and ``b1 != b0``)."""
    b0, b1 = bucket_pair(key, st.params[6], st.params[1])
    return 1 if (pos >> 2) == b1 and b1 != b0 else 0


@njit(inline="always", cache=True)
def set_endpoints(st: TableState, e: Int, key: np.uint64) -> None:
    a, b = locator_cells(key, st.params[7], st.params[2], st.params[3])
    st.ea[e] = a
    st.eb[e] = b


@njit(cache=True)
def next_seed(st: TableState) -> np.uint64:
    """Next locator seed from the table's splitmix64 stream (deterministic per table seed)."""
    st.rng[0] = st.rng[0] + _GOLDEN
    return mix64(st.rng[0], np.uint64(0))


@njit(cache=True)
def rebuild(st: TableState) -> bool:
    """Rebuild the Othello over all live entries with fresh seeds until acyclic (bounded tries).

    On success every locator word becomes an image (``M_ALLW``) and ``params[7]`` holds the new
    seed. On failure (False) the locator is inconsistent and the caller must grow the table.
    """
    n_nodes = st.head.shape[0]
    for _ in range(MAX_REBUILD_TRIES):
        st.params[7] = next_seed(st)
        st.meta[M_REBUILDS] += 1
        st.locator[:] = 0
        for i in range(n_nodes):
            st.head[i] = -1
            st.comp[i] = i
            st.csize[i] = 1
        st.meta[M_FREE_L] = 0
        ok = True
        for pos in range(st.sentry.shape[0]):
            e = st.sentry[pos]
            if e < 0:
                continue
            key = st.skeys[pos]
            set_endpoints(st, e, key)
            if not add_edge(st, e, want_bit(st, key, pos)):
                ok = False
                break
        if ok:
            st.meta[M_ALLW] = 1
            return True
    return False
