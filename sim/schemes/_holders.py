"""Shared machinery of the baseline schemes: who holds which cache chunk, as seen from afar.

Owns ``HolderHistory`` (chunk id -> bitmask of holding workers, plus the recent flips needed to
answer "what did that region hold at time T"; numba kernels in ``_holder_kernels``; readable
twin ``tests/naive_sim.py::HolderHistoryTwin``). Must not read ``ctx.cluster`` or know any
scheme's policy.

Why a history instead of one copy of the state per viewer: a baseline whose routers learn cache
events over the WAN sees region r's caches as they were ``delay(o, r)`` ago, and that delay
differs per viewing region o. Keeping R copies of a million-entry map costs R times the memory;
instead the engine's events are applied at emission time (the truth) and every flip of a
(chunk, worker) bit is kept for ``horizon_ms``. A reader asks for the mask of a chunk *as of* a
per-region cutoff time and the flips after the cutoff are undone. A cutoff older than the horizon
is clamped to it (the reader sees a slightly fresher state than it should; horizons are set well
above every scheme's delays). Flips are recorded only when a bit actually changes, so undoing
is a plain XOR in reverse order.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from sim.schemes import _holder_kernels as hk
from sim.schemes.base import CacheEventBatch

Cutoff = list[float] | NDArray[np.float64] | None
"""Per-region "as of" times (index = region); None reads the current state."""


class HolderHistory:
    """Chunk id -> holder bitmask (bit w = worker w) with a flip log for stale reads (fast).

    Same API and semantics as ``tests/naive_sim.py::HolderHistoryTwin``; state in flat arrays
    (``_holder_kernels``).
    The table doubles when 60% full, after dropping entries nobody holds whose last flip is
    older than the horizon; the flip ring doubles before it would overwrite a flip inside it.
    """

    def __init__(
        self,
        worker_region: NDArray[np.int64],
        horizon_ms: float,
        capacity: int = 1 << 15,
        ring: int = 1 << 12,
    ) -> None:
        self.region = np.ascontiguousarray(worker_region, dtype=np.int64)
        self.n_workers = int(self.region.size)
        self.n_words = max(1, (self.n_workers + 63) // 64)
        self._horizon = float(horizon_ms)
        self._keep = self._horizon > 0.0
        self._alloc_table(max(8, 1 << (int(capacity) - 1).bit_length()))
        ring = max(1, int(ring)) if self._keep else 1
        self.f_t = np.zeros(ring, dtype=np.float64)
        self.f_w = np.zeros(ring, dtype=np.int64)
        self.f_prev = np.full(ring, -1, dtype=np.int64)
        self.f_seq = np.full(ring, -1, dtype=np.int64)
        self._ring = ring
        self.meta = np.zeros(2, dtype=np.int64)
        self._words = np.zeros(self.n_words, dtype=np.uint64)
        self._allowed: dict[int, NDArray[np.uint64]] = {}
        self._no_cut = np.zeros(1, dtype=np.float64)
        self.n_flips = 0

    def _alloc_table(self, cap: int) -> None:
        self.keys = np.zeros(cap, dtype=np.int64)
        self.used = np.zeros(cap, dtype=np.uint8)
        self.masks = np.zeros((cap, self.n_words), dtype=np.uint64)
        self.last = np.full(cap, -1, dtype=np.int64)
        self._grow_at = int(0.6 * cap)

    def __len__(self) -> int:
        return int(np.count_nonzero(self.masks.any(axis=1)))

    def _make_room(self, t: float, n_new: int, n_flips: int) -> None:
        used, seq = self.meta.tolist()
        if used + n_new > self._grow_at:
            cap = self.keys.shape[0]
            oldest = t - self._horizon
            args = (self.used, self.masks, self.last, self.f_t, self.f_seq, seq)
            live = hk._count_live(*args, oldest)
            new_cap = cap
            while (live + n_new) > 0.3 * new_cap:
                new_cap *= 2
            old = (self.keys, self.used, self.masks, self.last)
            self._alloc_table(new_cap)
            self.meta[0] = hk._rebuild(
                old[0], old[1], old[2], old[3], self.f_t, self.f_seq, seq, oldest,
                self.keys, self.used, self.masks, self.last,
            )  # fmt: skip
        if not self._keep:
            return
        ring = self._ring
        victim = seq + n_flips - 1 - ring  # newest flip the batch would overwrite
        if n_flips > ring or (
            victim >= 0
            and self.f_seq.item(victim % ring) == victim
            and self.f_t.item(victim % ring) >= t - self._horizon
        ):
            self._grow_ring(max(2 * ring, 1 << (2 * n_flips - 1).bit_length()))

    def _grow_ring(self, size: int) -> None:
        ring = self.f_t.shape[0]
        seq = int(self.meta[1])
        f_t = np.zeros(size, dtype=np.float64)
        f_w = np.zeros(size, dtype=np.int64)
        f_prev = np.full(size, -1, dtype=np.int64)
        f_seq = np.full(size, -1, dtype=np.int64)
        for s in range(max(0, seq - ring), seq):
            j, k = s % ring, s % size
            if self.f_seq[j] == s:
                f_t[k], f_w[k], f_prev[k], f_seq[k] = (
                    self.f_t[j], self.f_w[j], self.f_prev[j], s,
                )  # fmt: skip
        self.f_t, self.f_w, self.f_prev, self.f_seq = f_t, f_w, f_prev, f_seq
        self._ring = size

    def apply(self, batch: CacheEventBatch) -> None:
        """Apply one worker's stored/removed chunks at the batch's emission time."""
        stored = np.ascontiguousarray(batch.stored_nodes, dtype=np.int64)
        removed = np.ascontiguousarray(batch.removed_nodes, dtype=np.int64)
        if stored.size + removed.size == 0:
            return
        t = float(batch.at_ms)
        self._make_room(t, int(stored.size), int(stored.size + removed.size))
        self.n_flips += hk._apply(
            self.keys, self.used, self.masks, self.last,
            self.f_t, self.f_w, self.f_prev, self.f_seq, self.meta,
            int(batch.worker), t, stored, removed, self._keep,
        )  # fmt: skip

    def _cut(self, cutoff: Cutoff) -> NDArray[np.float64]:
        if cutoff is None:
            return self._no_cut
        if isinstance(cutoff, np.ndarray):
            return cutoff
        return np.asarray(cutoff, dtype=np.float64)

    def mask(self, node: int, cutoff: Cutoff) -> int:
        """Holders of ``node``: now (``cutoff`` None) or as of ``cutoff[region]`` per holder."""
        words = self._words
        hk._holders(
            self.keys, self.used, self.masks, self.last,
            self.f_t, self.f_w, self.f_prev, self.f_seq, self.meta,
            self.region, int(node), self._cut(cutoff), cutoff is None, words,
        )  # fmt: skip
        m = 0
        for k in range(self.n_words):
            m |= int(words[k]) << (64 * k)
        return m

    def match(
        self,
        nodes: NDArray[np.int64] | list[int],
        allowed: int,
        cutoff: Cutoff,
        out: NDArray[np.int64],
    ) -> int:
        """Write into ``out[w]`` how many leading chunks of ``nodes`` each allowed worker holds.

        ``out`` must be zeroed by the caller (only workers with a match are written). Returns
        the longest match in chunks.
        """
        words = self._allowed.get(allowed)
        if words is None:
            words = np.array(
                [(allowed >> (64 * k)) & 0xFFFF_FFFF_FFFF_FFFF for k in range(self.n_words)],
                dtype=np.uint64,
            )
            self._allowed[allowed] = words
        arr = nodes if isinstance(nodes, np.ndarray) else np.asarray(nodes, dtype=np.int64)
        depth: int = hk._match(
            self.keys, self.used, self.masks, self.last,
            self.f_t, self.f_w, self.f_prev, self.f_seq, self.meta,
            self.region, arr, words, self._cut(cutoff), cutoff is None, out,
        )  # fmt: skip
        return depth


def _write(mask: int, value: int, out: NDArray[np.int64]) -> None:
    while mask:
        low = mask & -mask
        out[low.bit_length() - 1] = value
        mask ^= low


def bits_of(workers: NDArray[np.int64] | list[int]) -> int:
    """Bitmask with the bits of ``workers`` set."""
    m = 0
    for w in workers:
        m |= 1 << int(w)
    return m
