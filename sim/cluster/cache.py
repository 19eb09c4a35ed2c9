"""Two-tier (VRAM, DRAM) prefix KV cache of one simulated worker, at chunk granularity.

Owns which prefix chunks a worker holds, in which tier, and the eviction order (LRU, LFU or
FIFO); reports every change (stored, promoted, demoted, removed) so the worker can publish the
same cache events a real SGLang worker would. Must not know time, keys or schemes.

Prefix-closed by construction. A chunk id names its whole prefix (``sim.engine.requests``), and
the eviction key of a chunk is never larger than its parent's:

* LRU  key = (last-touch tick, -depth): touching a chunk touches its whole path;
* LFU  key = (touch count, last-touch tick, -depth): a parent is touched whenever a child is;
* FIFO key = (tick of the newest insertion under the chunk, -depth): leaf-first FIFO. A pure
  hit does not refresh a chunk (that would be LRU), but inserting a child refreshes its path;
  plain insertion order would evict a parent before its younger child.

The smallest key leaves a tier first, so a child always leaves before its parent: a held chunk's
ancestors are held, VRAM chunks form a prefix of every cached path and DRAM chunks its tail.
That makes "longest held prefix" a binary search over the prompt's chunk ids.

VRAM overflow demotes (smallest key first) to DRAM; DRAM overflow removes. Serving a prompt
promotes its reused DRAM chunks back to VRAM (the reload the cost model charges) and inserts the
new chunks in VRAM. Heaps are lazy (stale entries skipped on pop, compacted when they pile up).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from kvcompass.errors import InvalidInputError

VRAM = 1
DRAM = 2
_DEPTH_BITS = 20
_MAXD = (1 << _DEPTH_BITS) - 1
_TICK_BITS = 40


@dataclass(slots=True)
class CacheChange:
    """What one operation changed: lists of (chunk id, depth, owner request)."""

    stored: list[tuple[int, int, int]] = field(default_factory=list)
    promoted: list[tuple[int, int, int]] = field(default_factory=list)
    demoted: list[tuple[int, int, int]] = field(default_factory=list)
    removed: list[tuple[int, int, int]] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.stored or self.promoted or self.demoted or self.removed)


class PrefixCache:
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

    def serve(self, chunks: list[int], owner: int, change: CacheChange | None) -> tuple[int, int]:
        """Reuse the held prefix of ``chunks``, promote it to VRAM, insert the rest in VRAM.

        Returns (reused chunks, of which reloaded from DRAM).
        """
        m, m_dram = self.match(chunks)
        self.tick += 1
        self._touch_path(chunks, m, owner, VRAM, change)
        self._evict(change)
        return m, m_dram

    def place(self, chunks: list[int], owner: int, tier: int, change: CacheChange | None) -> int:
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
        change: CacheChange | None,
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

    def _evict(self, change: CacheChange | None) -> None:
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
