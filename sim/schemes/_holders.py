"""Shared machinery of the baseline schemes: who holds which cache chunk, as seen from afar.

Owns ``HolderHistory`` (chunk id -> bitmask of holding workers, plus the recent flips needed to
answer "what did that region hold at time T") and ``mix64`` (the seeded 64-bit mixer every
hash-placement baseline uses instead of Python's ``hash()``). Must not read ``ctx.cluster`` or
know any scheme's policy.

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

from collections import deque

import numpy as np
from numpy.typing import NDArray

from sim.schemes.base import CacheEventBatch

_M64 = (1 << 64) - 1


def mix64(x: int, seed: int) -> int:
    """SplitMix64 finaliser of ``x`` xor a seed: a stateless, well-spread 64-bit hash."""
    z = ((x ^ seed) + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class HolderHistory:
    """Chunk id -> bitmask of workers (bit w = worker w) with per-flip history for stale reads."""

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
        stored = [n for n in batch.stored_nodes.tolist() if not get(n, 0) & bit]
        for n in stored:
            cur[n] = get(n, 0) | bit
        removed = [n for n in batch.removed_nodes.tolist() if get(n, 0) & bit]
        clear = ~bit
        for n in removed:
            m = cur[n] & clear
            if m:
                cur[n] = m
            else:
                del cur[n]
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
        self, nodes: list[int], allowed: int, cutoff: list[float] | None, out: NDArray[np.int64]
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
        for node in nodes:
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
