"""Maintenance-side Othello (the 1-bit locator) over a ``TableState`` (numba kernels).

Owns: adding and removing key edges, changing a key's locator bit, cycle detection, and the full
rebuild with a fresh locator seed when an insert would close a cycle. Must not: touch buckets or
decide growth (``ops.py`` does).

Invariant: the edges form a forest and for every live entry ``e`` with cells ``(a, b)``,
``cell[a] ^ cell[b] == 1`` iff the key sits in its bucket ``b1`` (and ``b0 != b1``).

Connectivity without labels: both questions the maintenance side asks — "are ``u`` and ``w`` in
one tree?" (insert) and "which half of the tree is smaller?" (bit change) — are answered by
two-sided walks that step a DFS from each endpoint alternately and stop as soon as one side is
exhausted (or meets the other endpoint). The cost is twice the SMALLER side, which in this
sparse forest (average degree ~0.8) is usually one or two nodes; delete is an O(1) unlink with
no relabelling at all (a union-find with labels must re-walk one side on every delete). The
smaller side is also the one flipped, so the emitted word images stay few.
Every changed cell marks its 64-bit word dirty (an image for the view).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvcompass.ludo.hashing import Int, bucket_pair, locator_cells, mix64
from kvcompass.ludo.state import EMPTY, M_ALLW, M_NW, M_REBUILDS, M_SEEN, TableState

MAX_REBUILD_TRIES = 64
CONNECTED, SIDE_A, SIDE_B = 0, 1, 2
_ONE = np.uint64(1)
_S6 = np.uint64(6)
_M63 = np.uint64(63)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True)
def cell(st: TableState, c: Int) -> np.uint64:
    locator = st.locator
    cc = np.uint64(c)
    return np.uint64((locator[cc >> _S6] >> (cc & _M63)) & _ONE)


@njit(cache=True)
def flip_cell(st: TableState, c: Int) -> None:
    locator = st.locator
    wdirty = st.wdirty
    wlist = st.wlist
    meta = st.meta
    cc = np.uint64(c)
    w = np.int64(cc >> _S6)
    locator[w] ^= _ONE << (cc & _M63)
    if wdirty[w] == 0:
        wdirty[w] = 1
        wlist[meta[M_NW]] = w
        meta[M_NW] += 1


@njit(cache=True)
def _step(st: TableState, base: Int, top: Int, target: Int) -> Int:
    """Pop one node of the side whose stack starts at ``base``; push its children.

    Returns the new stack top, or -1 if a child is ``target`` (the endpoints are connected).
    A tree has no cycles, so skipping the edge a node was reached by never revisits a node.
    """
    stack = st.stack
    via = st.via
    head = st.head
    half = st.half
    top -= 1
    node = stack[base + top]
    came = via[base + top]
    h = head[node]
    while h != -1:
        if (h >> 1) != came:
            other = half[3 * h + 2]
            if other == target:
                return -1
            stack[base + top] = other
            via[base + top] = h >> 1
            top += 1
        h = half[3 * h]
    return top


@njit(cache=True)
def two_sided_walk(st: TableState, u: Int, w: Int, skip_edge: Int) -> Int:
    """Walk the trees of ``u`` and ``w`` (never crossing ``skip_edge``) alternately.

    Returns ``CONNECTED`` if one walk reaches the other endpoint, else ``SIDE_A`` / ``SIDE_B``:
    the side exhausted first (the smaller or equal one), whose nodes are then
    ``seen[base : base + meta[M_SEEN]]`` with ``base = 0`` (A) or ``N`` (B).
    """
    stack = st.stack
    via = st.via
    seen = st.seen
    meta = st.meta
    n = st.head.shape[0]
    stack[0] = u
    via[0] = skip_edge
    stack[n] = w
    via[n] = skip_edge
    top_a = 1
    top_b = 1
    seen_a = 0
    seen_b = 0
    while True:
        seen[seen_a] = stack[top_a - 1]
        seen_a += 1
        top_a = _step(st, 0, top_a, w)
        if top_a < 0:
            return CONNECTED
        if top_a == 0:
            meta[M_SEEN] = seen_a
            return SIDE_A
        seen[n + seen_b] = stack[n + top_b - 1]
        seen_b += 1
        top_b = _step(st, n, top_b, u)
        if top_b < 0:
            return CONNECTED
        if top_b == 0:
            meta[M_SEEN] = seen_b
            return SIDE_B


@njit(cache=True)
def _flip_side(st: TableState, side: Int) -> None:
    seen = st.seen
    count = st.meta[M_SEEN]
    base = 0 if side == SIDE_A else st.head.shape[0]
    for i in range(count):
        flip_cell(st, seen[base + i])


@njit(cache=True)
def _link(st: TableState, h: Int, node: Int, other: Int) -> None:
    head = st.head
    half = st.half
    first = head[node]
    half[3 * h] = first
    half[3 * h + 1] = -1
    half[3 * h + 2] = other
    if first != -1:
        half[3 * first + 1] = h
    head[node] = h


@njit(cache=True)
def _unlink(st: TableState, h: Int, node: Int) -> None:
    head = st.head
    half = st.half
    nxt = half[3 * h]
    prv = half[3 * h + 1]
    if prv == -1:
        head[node] = nxt
    else:
        half[3 * prv] = nxt
    if nxt != -1:
        half[3 * nxt + 1] = prv


@njit(cache=True)
def add_edge(st: TableState, e: Int, u: Int, w: Int, want: Int) -> bool:
    """Add entry ``e`` as edge ``(u, w)`` with locator bit ``want``; False (no change) on a cycle."""
    head = st.head
    flip = (cell(st, u) ^ cell(st, w)) != np.uint64(want)
    if head[u] == -1:  # isolated endpoint: its own one-node side
        if flip:
            flip_cell(st, u)
    elif head[w] == -1:
        if flip:
            flip_cell(st, w)
    else:
        side = two_sided_walk(st, u, w, -1)
        if side == CONNECTED:
            return False
        if flip:
            _flip_side(st, side)
    _link(st, 2 * e, u, w)
    _link(st, 2 * e + 1, w, u)
    return True


@njit(cache=True)
def remove_edge(st: TableState, e: Int) -> None:
    """Remove entry ``e``'s edge; no cell changes (the view needs no locator image)."""
    half = st.half
    u = half[3 * (2 * e + 1) + 2]
    w = half[3 * (2 * e) + 2]
    _unlink(st, 2 * e, u)
    _unlink(st, 2 * e + 1, w)


@njit(cache=True)
def set_bit(st: TableState, e: Int, want: Int) -> None:
    """Make entry ``e``'s locator bit ``want`` by flipping the smaller half tree beside it."""
    half = st.half
    u = half[3 * (2 * e + 1) + 2]
    w = half[3 * (2 * e) + 2]
    if (cell(st, u) ^ cell(st, w)) != np.uint64(want):
        _flip_side(st, two_sided_walk(st, u, w, e))


@njit(cache=True)
def want_bit(st: TableState, key: np.uint64, bucket: Int) -> Int:
    """Locator bit a key in ``bucket`` needs: 1 iff it is ``b1`` (and ``b1 != b0``)."""
    params = st.params
    b0, b1 = bucket_pair(key, params[6], params[1])
    return 1 if bucket == b1 and b1 != b0 else 0


@njit(cache=True)
def add_key(st: TableState, e: Int, key: np.uint64, bucket: Int) -> bool:
    """Register entry ``e`` (``key`` in ``bucket``) in the Othello; False on a cycle."""
    params = st.params
    a, b = locator_cells(key, params[7], params[2], params[3])
    return add_edge(st, e, a, b, want_bit(st, key, bucket))


@njit(cache=True)
def next_seed(st: TableState) -> np.uint64:
    """Next locator seed from the table's splitmix64 stream (deterministic per table seed)."""
    rng = st.rng
    rng[0] = rng[0] + _GOLDEN
    return mix64(rng[0], np.uint64(0))


@njit(cache=True)
def rebuild(st: TableState) -> bool:
    """Rebuild the Othello over all live entries with fresh seeds until acyclic (bounded tries).

    On success every locator word becomes an image (``M_ALLW``) and ``params[7]`` holds the new
    seed. On failure (False) the locator is inconsistent and the caller must grow the table.
    """
    params = st.params
    meta = st.meta
    locator = st.locator
    head = st.head
    skeys = st.skeys
    sentry = st.sentry
    for _ in range(MAX_REBUILD_TRIES):
        params[7] = next_seed(st)
        meta[M_REBUILDS] += 1
        locator[:] = 0
        head[:] = -1
        ok = True
        for pos in range(skeys.shape[0]):
            key = skeys[pos]
            if key != EMPTY and not add_key(st, sentry[pos], key, pos >> 2):
                ok = False
                break
        if ok:
            meta[M_ALLW] = 1
            return True
    return False
