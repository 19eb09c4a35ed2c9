"""Readable twins of the simulator's fast caches, re-exported by ``tests/naive.py``.

Kept in their own module so ``tests/naive.py`` stays under 500 lines; test-only, so they do not
ship in ``sim/``. Each is the slow, obviously correct model its numba twin is compared against
(``tests/sim/test_engine.py``, ``tests/sim/test_baselines_e2e.py``).

``ChunkCacheTwin`` — ``sim.cluster.kernels`` / ``sim.cluster.store.CacheStore``: one worker's
two-tier chunk cache as a dict and one lazy heap per tier (stale entries skipped on pop,
compacted when they pile up; the model, eviction keys and why it is
prefix-closed: ``sim.cluster.store``'s docstring).

``HolderHistoryTwin`` — ``sim.schemes._holders.HolderHistory``: chunk id -> holder bitmask with
the flip log for stale reads (the module docstring there explains the history).
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.types import Tier
from sim.schemes.base import CacheEventBatch

VRAM = int(Tier.VRAM)
DRAM = int(Tier.DRAM)
_DEPTH_BITS = 20
_MAXD = (1 << _DEPTH_BITS) - 1
_TICK_BITS = 40


@dataclass(slots=True)
class ChunkChange:
    """What one operation changed: lists of (chunk id, depth, owner request)."""

    stored: list[tuple[int, int, int]] = field(default_factory=list)
    promoted: list[tuple[int, int, int]] = field(default_factory=list)
    demoted: list[tuple[int, int, int]] = field(default_factory=list)
    removed: list[tuple[int, int, int]] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.stored or self.promoted or self.demoted or self.removed)


class ChunkCacheTwin:
    """Chunk id -> [tier, key, depth, owner request, touches]; one lazy min-heap per tier."""

    __slots__ = ("_fifo", "_lfu", "cap", "count", "heaps", "state", "tick")

    def __init__(self, vram_chunks: int, dram_chunks: int, policy: str) -> None:
        if policy not in ("lru", "lfu", "fifo"):
            raise InvalidInputError(f"policy: expected lru, lfu or fifo, got {policy!r}")
        if vram_chunks <= 0 or dram_chunks < 0:
            raise InvalidInputError(
                f"capacities: expected vram > 0 and dram >= 0 chunks, got {vram_chunks}, "
                f"{dram_chunks}"
            )
        self.cap = [0, vram_chunks, dram_chunks]
        self.count = [0, 0, 0]
        self.heaps: list[list[tuple[int, int]]] = [[], [], []]
        self.state: dict[int, list[int]] = {}
        self.tick = 0
        self._lfu = policy == "lfu"
        self._fifo = policy == "fifo"

    def __len__(self) -> int:
        return len(self.state)

    def match(self, chunks: list[int]) -> tuple[int, int]:
        """(held chunks, of which in DRAM) of the longest held prefix of ``chunks``."""
        state = self.state
        lo, hi = 0, len(chunks)
        while lo < hi:  # largest m with chunks[m-1] held (prefix-closed: monotone predicate)
            mid = (lo + hi + 1) >> 1
            if chunks[mid - 1] in state:
                lo = mid
            else:
                hi = mid - 1
        if lo == 0:
            return 0, 0
        # VRAM chunks form a prefix of the held path: binary search the first DRAM one.
        a, b = 0, lo
        while a < b:
            mid = (a + b) >> 1
            if state[chunks[mid]][0] == DRAM:
                b = mid
            else:
                a = mid + 1
        return lo, lo - a

    def _key(self, st: list[int], depth: int) -> int:
        if self._lfu:
            return (((st[4] << _TICK_BITS) | self.tick) << _DEPTH_BITS) | (_MAXD - depth)
        return (self.tick << _DEPTH_BITS) | (_MAXD - depth)

    def serve(self, chunks: list[int], owner: int, change: ChunkChange | None) -> tuple[int, int]:
        """Reuse the held prefix of ``chunks``, promote it to VRAM, insert the rest in VRAM.

        Returns (reused chunks, of which reloaded from DRAM).
        """
        m, m_dram = self.match(chunks)
        self.tick += 1
        self._touch_path(chunks, m, owner, VRAM, change)
        self._evict(change)
        return m, m_dram

    def place(self, chunks: list[int], owner: int, tier: int, change: ChunkChange | None) -> int:
        """Make the whole path held, new chunks into ``tier`` (migration into DRAM); no promotion.

        Returns how many chunks were already held.
        """
        m, _ = self.match(chunks)
        self.tick += 1
        self._touch_path(chunks, m, owner, tier, change, promote=False)
        self._evict(change)
        return m

    def _touch_path(
        self,
        chunks: list[int],
        m: int,
        owner: int,
        new_tier: int,
        change: ChunkChange | None,
        promote: bool = True,
    ) -> None:
        state, heaps, count = self.state, self.heaps, self.count
        # FIFO refreshes the path only when it grows (see the module docstring).
        fifo, push = self._fifo and len(chunks) == m, heapq.heappush
        for depth in range(m):
            c = chunks[depth]
            st = state[c]
            st[4] += 1
            if not fifo:
                st[1] = self._key(st, depth)
            if st[0] == DRAM and promote:
                st[0] = VRAM
                count[DRAM] -= 1
                count[VRAM] += 1
                if change is not None:
                    change.promoted.append((c, depth, st[3]))
                push(heaps[VRAM], (st[1], c))
            elif not fifo:
                push(heaps[st[0]], (st[1], c))
        for depth in range(m, len(chunks)):
            c = chunks[depth]
            st = [new_tier, 0, depth, owner, 1]
            st[1] = self._key(st, depth)
            state[c] = st
            count[new_tier] += 1
            push(heaps[new_tier], (st[1], c))
            if change is not None:
                change.stored.append((c, depth, owner))

    def _pop_valid(self, tier: int) -> int:
        heap, state = self.heaps[tier], self.state
        while True:
            key, c = heapq.heappop(heap)
            st = state.get(c)
            if st is not None and st[0] == tier and st[1] == key:
                return c

    def _evict(self, change: ChunkChange | None) -> None:
        count, cap, state = self.count, self.cap, self.state
        while count[VRAM] > cap[VRAM]:
            c = self._pop_valid(VRAM)
            st = state[c]
            count[VRAM] -= 1
            if cap[DRAM] > 0:
                st[0] = DRAM
                count[DRAM] += 1
                heapq.heappush(self.heaps[DRAM], (st[1], c))
                if change is not None:
                    change.demoted.append((c, st[2], st[3]))
            else:
                del state[c]
                if change is not None:
                    change.removed.append((c, st[2], st[3]))
        while count[DRAM] > cap[DRAM]:
            c = self._pop_valid(DRAM)
            st = state.pop(c)
            count[DRAM] -= 1
            if change is not None:
                change.removed.append((c, st[2], st[3]))
        for tier in (VRAM, DRAM):
            if len(self.heaps[tier]) > 4 * count[tier] + 4096:
                self._compact(tier)

    def _compact(self, tier: int) -> None:
        heap = [(st[1], c) for c, st in self.state.items() if st[0] == tier]
        heapq.heapify(heap)
        self.heaps[tier] = heap

    def tier_of(self, chunk: int) -> int:
        """0 (absent), 1 (VRAM) or 2 (DRAM)."""
        st = self.state.get(chunk)
        return 0 if st is None else st[0]


def _write(mask: int, value: int, out: NDArray[np.int64]) -> None:
    while mask:
        low = mask & -mask
        out[low.bit_length() - 1] = value
        mask ^= low


class HolderHistoryTwin:
    """Readable twin of ``sim.schemes._holders.HolderHistory`` (dicts of Python ints)."""

    __slots__ = ("_bits", "_cur", "_horizon", "_log", "_recent", "_region", "n_flips")

    def __init__(self, worker_region: NDArray[np.int64], horizon_ms: float) -> None:
        self._region: list[int] = [int(r) for r in worker_region]
        self._bits: list[int] = [1 << w for w in range(len(self._region))]
        self._horizon = float(horizon_ms)
        self._cur: dict[int, int] = {}
        # node -> [(t, worker), ...] flips in time order, only within the horizon; the log keeps
        # each batch's flipped nodes so pruning touches only what expired.
        self._recent: dict[int, list[tuple[float, int]]] = {}
        self._log: deque[tuple[float, list[int]]] = deque()
        self.n_flips = 0

    def __len__(self) -> int:
        return len(self._cur)

    def apply(self, batch: CacheEventBatch) -> None:
        """Apply one worker's stored/removed chunks at the batch's emission time."""
        t = batch.at_ms
        w = batch.worker
        bit = self._bits[w]
        cur = self._cur
        get = cur.get
        # Only real transitions count (a worker re-announcing a chunk changes nothing).
        stored: list[int] = []
        for n in batch.stored_nodes.tolist():
            m = get(n, 0)
            if not m & bit:
                cur[n] = m | bit
                stored.append(n)
        removed: list[int] = []
        clear = ~bit
        for n in batch.removed_nodes.tolist():
            m = get(n, 0)
            if m & bit:
                m &= clear
                if m:
                    cur[n] = m
                else:
                    del cur[n]
                removed.append(n)
        if self._horizon <= 0.0 or not (stored or removed):
            return
        self._prune(t)
        flipped = stored + removed
        self.n_flips += len(flipped)
        entry = (t, w)
        recent = self._recent
        rget = recent.get
        for n in flipped:
            lst = rget(n)
            if lst is None:
                recent[n] = [entry]
            else:
                lst.append(entry)
        self._log.append((t, flipped))

    def _prune(self, now_ms: float) -> None:
        oldest = now_ms - self._horizon
        log, recent = self._log, self._recent
        while log and log[0][0] < oldest:
            # Batches leave in time order, so each node's oldest flip is this batch's own.
            _, nodes = log.popleft()
            for n in nodes:
                lst = recent[n]
                if len(lst) == 1:
                    del recent[n]
                else:
                    del lst[0]

    def mask(self, node: int, cutoff: list[float] | None) -> int:
        """Holders of ``node``: now (``cutoff`` None) or as of ``cutoff[region]`` per holder."""
        m = self._cur.get(node, 0)
        if cutoff is None:
            return m
        lst = self._recent.get(node)
        if lst:
            # XOR undoes a flip whatever the order; cutoffs differ per region, so scan them all.
            region, bits = self._region, self._bits
            for t, w in lst:
                if t > cutoff[region[w]]:
                    m ^= bits[w]
        return m

    def match(
        self,
        nodes: NDArray[np.int64] | list[int],
        allowed: int,
        cutoff: list[float] | None,
        out: NDArray[np.int64],
    ) -> int:
        """Write into ``out[w]`` how many leading chunks of ``nodes`` each allowed worker holds.

        ``out`` must be zeroed by the caller (only workers with a match are written). Returns the
        longest match in chunks. A worker's match stops at its first missing chunk (caches are
        prefix-closed; a lone deeper chunk cannot be reused without its parents).
        """
        alive = allowed
        depth = 0
        get = self._cur.get
        rget = self._recent.get
        region, bits = self._region, self._bits
        for node in nodes.tolist() if isinstance(nodes, np.ndarray) else nodes:
            m = get(node, 0)
            if cutoff is not None:
                lst = rget(node)
                if lst:
                    for t, w in lst:
                        if t > cutoff[region[w]]:
                            m ^= bits[w]
            m &= alive
            if m != alive:
                if depth:
                    _write(alive & ~m, depth, out)
                if not m:
                    return depth
                alive = m
            depth += 1
        _write(alive, depth, out)
        return depth
