"""Maintenance-side Othello (the 1-bit locator): edges, bit changes, cycles, rebuild (numba).

Owns: adding and removing key edges, changing a key's locator bit, cycle detection, and the full
rebuild with a fresh locator seed when an insert would close a cycle. Must not: touch buckets or
decide growth (``ops.py`` does).

Invariant: the edges form a forest and for every live entry ``e`` with cells ``(a, b)``,
``cell[a] ^ cell[b] == 1`` iff the key sits in its bucket ``b1`` (and ``b0 != b1``).

Connectivity without labels: both questions the maintenance side asks — "are ``u`` and ``w`` in
one tree?" (insert) and "which half of the tree is smaller?" (bit change) — are answered by
two-sided walks that step a DFS from each endpoint alternately and stop as soon as one side is
exhausted (or meets the other endpoint). The cost is about twice the SMALLER side, which in this
sparse forest (average degree ~0.8) is usually one or two nodes; delete is an O(1) unlink with
no relabelling (a union-find with labels must re-walk one side on every delete). The smaller
side is also the one flipped, so the emitted word images stay few. Every changed cell marks its
64-bit word dirty (an image for the view).

Calling convention: that of ``cuckoo.py`` (structure helpers take the unpacked ``TableState``
``st``; the locator is ``st.locator``, its nodes' list heads ``st.head``, half-edges ``st.half``).
"""

from __future__ import annotations

import numpy as np

from kvcompass.ludo.hashing import Int, bucket_pair, locator_cells, mix64
from kvcompass.ludo.jit import inlined, kernel
from kvcompass.ludo.params import (
    P_BUCKET_SEED,
    P_BUCKETS,
    P_LOCATOR_SEED,
    P_MA,
    P_MB,
)
from kvcompass.ludo.prefetch import prefetch
from kvcompass.ludo.state import (
    EMPTY,
    I32,
    M_ALLW,
    M_NW,
    M_REBUILDS,
    M_SEEN,
    M_WALKED,
    M_WALKS,
    U64,
    TableState,
    unpack,
)
from kvcompass.mix import GOLDEN

MAX_REBUILD_TRIES = 64
CONNECTED, SIDE_A, SIDE_B = 0, 1, 2
_ONE = np.uint64(1)
_S6 = np.uint64(6)
_M63 = np.uint64(63)
_GOLDEN = GOLDEN


@kernel
def cell(loc: U64, c: Int) -> np.uint64:
    cc = np.uint64(c)
    return np.uint64((loc[cc >> _S6] >> (cc & _M63)) & _ONE)


@inlined
def flip_cell(st: TableState, c: Int) -> None:
    """Flip locator cell ``c``; list its word as dirty (once per call)."""
    cc = np.uint64(c)
    w = np.int64(cc >> _S6)
    st.locator[w] ^= _ONE << (cc & _M63)
    if st.wdirty[w] == 0:
        st.wdirty[w] = 1
        st.wlist[st.meta[M_NW]] = w
        st.meta[M_NW] += 1


@inlined
def _step(st: TableState, base: Int, top: Int, target: Int) -> Int:
    """Pop one node of the side whose stack starts at ``base``; push its children.

    Returns the new stack top, or -1 if a child is ``target`` (the endpoints are connected).
    A tree has no cycles, so skipping the edge a node was reached by never revisits a node.
    """
    head, half, stack, via = st.head, st.half, st.stack, st.via
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
            prefetch(head, other)  # popped within a step or two (the other side steps between)
        h = half[3 * h]
    return top


@inlined
def two_sided_walk(st: TableState, u: Int, w: Int, skip: Int) -> Int:
    """Walk the trees of ``u`` and ``w`` (never crossing edge ``skip``) alternately.

    Returns ``CONNECTED`` if one walk reaches the other endpoint, else ``SIDE_A`` / ``SIDE_B``:
    the side exhausted first (the smaller or equal one), whose nodes are then
    ``seen[base : base + meta[M_SEEN]]`` with ``base = 0`` (A) or ``N`` (B).
    """
    stack, via, seen, meta = st.stack, st.via, st.seen, st.meta
    n = st.head.shape[0]
    meta[M_WALKS] += 1
    stack[0] = u
    via[0] = skip
    stack[n] = w
    via[n] = skip
    top_a: Int = 1
    top_b: Int = 1
    seen_a = 0
    seen_b = 0
    while True:
        seen[seen_a] = stack[top_a - 1]
        seen_a += 1
        meta[M_WALKED] += 2
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


@inlined
def _flip_side(st: TableState, side: Int) -> None:
    """Flip every cell of the side ``two_sided_walk`` listed (``SIDE_A`` or ``SIDE_B``)."""
    base: Int = 0 if side == SIDE_A else st.head.shape[0]
    for i in range(st.meta[M_SEEN]):
        flip_cell(st, np.int64(st.seen[base + i]))


@inlined
def _link(head: I32, half: I32, h: Int, node: Int, other: Int) -> None:
    first = head[node]
    half[3 * h] = first
    half[3 * h + 1] = -1
    half[3 * h + 2] = other
    if first != -1:
        half[3 * first + 1] = h
    head[node] = h


@inlined
def _unlink(head: I32, half: I32, h: Int, node: Int) -> None:
    nxt = half[3 * h]
    prv = half[3 * h + 1]
    if prv == -1:
        head[node] = nxt
    else:
        half[3 * prv] = nxt
    if nxt != -1:
        half[3 * nxt + 1] = prv


@inlined
def add_edge(st: TableState, e: Int, u: Int, w: Int, want: Int) -> bool:
    """Add entry ``e`` as edge ``(u, w)`` with bit ``want``; False (no change) on a cycle."""
    head = st.head
    flip = (cell(st.locator, u) ^ cell(st.locator, w)) != np.uint64(want)
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
    _link(head, st.half, 2 * e, u, w)
    _link(head, st.half, 2 * e + 1, w, u)
    return True


@inlined
def remove_edge(st: TableState, e: Int) -> None:
    """Remove entry ``e``'s edge; no cell changes (the view needs no locator image)."""
    head, half = st.head, st.half
    _unlink(head, half, 2 * e, half[3 * (2 * e + 1) + 2])
    _unlink(head, half, 2 * e + 1, half[3 * (2 * e) + 2])


@inlined
def set_bit(st: TableState, e: Int, want: Int) -> None:
    """Make entry ``e``'s locator bit ``want`` by flipping the smaller half tree beside it."""
    u = st.half[3 * (2 * e + 1) + 2]
    w = st.half[3 * (2 * e) + 2]
    prefetch(st.head, u)
    prefetch(st.head, w)
    if (cell(st.locator, u) ^ cell(st.locator, w)) != np.uint64(want):
        _flip_side(st, two_sided_walk(st, u, w, e))


@kernel
def want_bit(params: U64, key: np.uint64, bucket: Int) -> Int:
    """Locator bit a key in ``bucket`` needs: 1 iff it is ``b1`` (and ``b1 != b0``)."""
    b0, b1 = bucket_pair(key, params[P_BUCKET_SEED], params[P_BUCKETS])
    return 1 if bucket == b1 and b1 != b0 else 0


@kernel
def next_seed(rng: U64) -> np.uint64:
    """Next locator seed from the table's splitmix64 stream (deterministic per table seed)."""
    rng[0] = rng[0] + _GOLDEN
    return mix64(rng[0], np.uint64(0))


@kernel
def rebuild(mem: U64) -> bool:
    """Rebuild the Othello over all live entries with fresh seeds until acyclic (bounded tries).

    On success every locator word becomes an image (``M_ALLW``) and ``params[P_LOCATOR_SEED]``
    holds the new seed. On failure (False) the locator is inconsistent and the caller must grow
    the table. Its own kernel (not inlined into ``ops.update_batch``): rare, and long.
    """
    st = unpack(mem)
    params, meta, skeys = st.params, st.meta, st.skeys
    for _ in range(MAX_REBUILD_TRIES):
        params[P_LOCATOR_SEED] = next_seed(st.rng)
        meta[M_REBUILDS] += 1
        st.locator[:] = 0
        st.head[:] = -1
        ok = True
        for pos in range(skeys.shape[0]):
            key = skeys[pos]
            if key == EMPTY:
                continue
            a, b = locator_cells(key, params[P_LOCATOR_SEED], params[P_MA], params[P_MB])
            if not add_edge(st, st.sentry[pos], a, b, want_bit(params, key, pos >> 2)):
                ok = False
                break
        if ok:
            meta[M_ALLW] = 1
            return True
    return False
