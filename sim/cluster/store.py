"""CacheStore: every worker's two-tier chunk cache, backed by the numba kernels.

Owns the flat arrays of ``sim.cluster.kernels`` and the validating wrappers around them: which
prefix chunks each worker holds, in which tier (``kvcompass.types.Tier``), the eviction order
(LRU, LFU or FIFO), and every change (stored, promoted, demoted, removed) so a worker can publish
the cache events a real SGLang worker would. The readable twin the tests compare it with is
``tests/naive_sim.py::ChunkCacheTwin``. Must not know time, keys or schemes.

The simulator's cache model, and how it differs from the emulated worker's
(``workers.emulated.cache.PrefixCache``): both are prefix-closed two-tier caches, but this one
holds chunk *ids* (a chunk id names its whole prefix, ``sim.engine.requests``), never tokens, KV
tensors or block hashes, for every worker at once in flat arrays, at the workload's chunk size;
the emulated one is one engine's radix tree over token pages that emits SGLang's KV events and can
hold real KV. Two implementations because the simulator must replay millions of requests per
minute and the emulated worker must speak SGLang's protocol; their eviction orders differ too
(FIFO exists only here; the emulated LRU/LFU break ties by the time a page entered its tier).

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
new chunks in VRAM.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.types import Tier
from sim.cluster import kernels as k


class CacheStore:
    """Chunk caches of ``n_workers`` workers, each ``vram_chunks`` + ``dram_chunks`` big."""

    def __init__(
        self,
        n_workers: int,
        vram_chunks: int,
        dram_chunks: int,
        policy: str,
        max_chunks: int,
        *,
        initial_rows: int | None = None,
    ) -> None:
        if policy not in ("lru", "lfu", "fifo"):
            raise InvalidInputError(f"policy: expected lru, lfu or fifo, got {policy!r}")
        if n_workers <= 0 or vram_chunks <= 0 or dram_chunks < 0 or max_chunks < 0:
            raise InvalidInputError(
                f"expected n_workers > 0, vram_chunks > 0, dram_chunks >= 0, max_chunks >= 0; "
                f"got {n_workers}, {vram_chunks}, {dram_chunks}, {max_chunks}"
            )
        self.n_workers = n_workers
        self.max_chunks = max_chunks
        self.lfu = policy == "lfu"
        self.fifo = policy == "fifo"
        # Rows are allocated on demand (doubling up to the full capacity): a short run on a big
        # deployment never fills most workers' DRAM, and page-sized chunks make the full pool big.
        self.full_pool = n_workers * (vram_chunks + dram_chunks) + max_chunks + 1
        first = max(1 << 16, 8 * max_chunks + 16) if initial_rows is None else initial_rows
        pool = min(self.full_pool, max(first, max_chunks + 1))
        self.pool = pool
        ht_size = 1 << max(4, int(2 * pool - 1).bit_length())
        self.mask = ht_size - 1
        self.ht = np.full(ht_size, -1, dtype=np.int64)
        self.nodes = np.zeros((pool, k.N_COLS), dtype=np.int64)
        self.free = np.arange(pool - 1, -1, -1, dtype=np.int64)
        self.n_free = np.array([pool], dtype=np.int64)
        width = max(vram_chunks, dram_chunks) + max_chunks + 2
        self.heap = np.zeros((n_workers, 2, width), dtype=np.int64)
        self.size = np.zeros((n_workers, 2), dtype=np.int64)
        self.count = np.zeros((n_workers, 2), dtype=np.int64)
        self.cap = np.array([vram_chunks, dram_chunks], dtype=np.int64)
        self.tick = np.zeros(n_workers, dtype=np.int64)
        out = 5 * max_chunks + 8
        # Rows of one block (kind, chunk, depth, owner): a caller copies ``o_rows[:, :n]`` once.
        self.o_rows = np.zeros((4, out), dtype=np.int64)
        self.o_kind, self.o_chunk, self.o_depth, self.o_owner = self.o_rows

    def _check(self, worker: int, chunks: NDArray[np.int64]) -> None:
        if not 0 <= worker < self.n_workers:
            raise InvalidInputError(f"worker: expected 0..{self.n_workers - 1}, got {worker}")
        if chunks.dtype != np.int64 or chunks.ndim != 1 or chunks.shape[0] > self.max_chunks:
            raise InvalidInputError(
                f"chunks: expected a 1-D int64 array of <= {self.max_chunks} ids, got "
                f"{chunks.dtype} shape {chunks.shape}"
            )

    def serve(
        self,
        worker: int,
        chunks: NDArray[np.int64],
        req: int,
        tier: Tier = Tier.VRAM,
        promote: bool = True,
    ) -> tuple[int, int, int]:
        """Serve (or, with ``promote=False`` and ``tier=Tier.DRAM``, place) a path on ``worker``.

        Returns (held chunks, of which in DRAM, number of changes); the changes are
        ``o_kind/o_chunk/o_depth/o_owner[:n]`` (kinds ``kernels.STORED`` ... ``REMOVED``).
        """
        self._check(worker, chunks)
        if self.n_free[0] <= chunks.shape[0]:
            self._grow()
        m, m_dram, n = k._serve(
            self.ht, self.mask, self.nodes, self.free, self.n_free,
            self.heap, self.size, self.count, self.cap, self.tick,
            worker, chunks, req, int(tier), promote, self.lfu, self.fifo,
            self.o_kind, self.o_chunk, self.o_depth, self.o_owner,
        )  # fmt: skip
        return int(m), int(m_dram), int(n)

    def _grow(self) -> None:
        """Double the node rows (row ids stay valid, so heaps are untouched); rehash if needed."""
        old, new = self.pool, min(self.full_pool, 2 * self.pool)
        if new == old:
            return
        nodes = np.zeros((new, k.N_COLS), dtype=np.int64)
        nodes[:old] = self.nodes
        nf = int(self.n_free[0])
        free = np.empty(new, dtype=np.int64)
        free[:nf] = self.free[:nf]
        free[nf : nf + new - old] = np.arange(new - 1, old - 1, -1, dtype=np.int64)
        self.nodes, self.free, self.pool = nodes, free, new
        self.n_free[0] = nf + new - old
        if 2 * new > self.ht.shape[0]:
            live = np.ones(old, dtype=np.bool_)
            live[self.free[:nf]] = False
            size = 1 << int(2 * new - 1).bit_length()
            self.ht = np.full(size, -1, dtype=np.int64)
            self.mask = size - 1
            k._ht_rebuild(self.ht, self.nodes, np.flatnonzero(live).astype(np.int64), self.mask)

    def match(self, worker: int, chunks: NDArray[np.int64]) -> tuple[int, int]:
        """(held chunks, of which in DRAM) on one worker, without touching anything."""
        self._check(worker, chunks)
        m, d = k._match(self.ht, self.nodes, worker, chunks, self.mask)
        return int(m), int(d)

    def match_all(self, chunks: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Held chunks and held-in-DRAM chunks of every worker (for exact-state schemes)."""
        self._check(0, chunks)
        out_m = np.zeros(self.n_workers, dtype=np.int64)
        out_d = np.zeros(self.n_workers, dtype=np.int64)
        k._match_all(self.ht, self.nodes, self.n_workers, chunks, self.mask, out_m, out_d)
        return out_m, out_d

    def held(self, worker: int) -> int:
        """Chunks held by a worker (both tiers)."""
        return int(self.count[worker].sum())
