"""The edge's pending-holder overlay: prefixes it forwarded that the index does not show yet.

(Vocabulary: a *pending holder* is a worker a prefix was sent to, not yet confirmed by the
index; a forward is *in flight* from its dispatch until it lands at the worker, the forward
ledger's meaning (``router.forwards``); a migration is *under way* until its replica lands
(``router.hot_prefix``); the edge's *open requests* to a worker are those not answered yet.)

Owns, for one edge, the prefix keys of every prompt it forwarded and the worker it sent each to,
until the index can confirm them. Between a forward and the patch that registers its prefill,
the index is blind to that prefix for a whole propagation path (WAN to the maintenance units,
their batch window and pipeline, WAN back); a burst of one family would scatter over workers
that each recompute it. So the edge counts a forwarded prompt as held by its target from the
moment it forwards it (SGLang's cache-aware gateway inserts a request into its radix tree at
routing time for the same reason). The target runs its queue in FIFO order, so any later prompt
the edge sends there finds the prefix computed when its own turn comes: the overlay's matches are
scored like VRAM hits.

Timeout, from the cost model rather than a tuned constant: an entry lives until the prefill is
predicted done (forward one-way + the target's queue estimate + its predicted service) plus
``confirm_ms``, the time a registration takes to reach this edge (the shell derives it from its
pipeline: WAN to the maintenance units, batch window, pipeline delay, WAN back). When the
response comes back, the real finish is known and ``hold`` moves the deadline to it plus the
same path. After the deadline the view answers alone (held: the index has it; evicted or lost:
nobody claims it). Must not read the index or the clock: the shell passes keys and ``now_ms``.
"""

from __future__ import annotations

import heapq
import math

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.types import Tier


class PendingHolders:
    """Per-key pending holders with deadlines; ``overlay`` raises the view's per-worker match."""

    __slots__ = ("_deadlines", "_entries", "_seq", "n_workers")

    def __init__(self, n_workers: int) -> None:
        if n_workers < 1:
            raise InvalidInputError(f"expected n_workers >= 1, got {n_workers}")
        self.n_workers = n_workers
        # key -> {worker: (deadline ms, prefix tokens, registered ms or -inf)}
        self._entries: dict[int, dict[int, tuple[float, int, float]]] = {}
        # One heap entry per ``hold`` call, not per key: (deadline, seq, worker, keys it held).
        self._deadlines: list[tuple[float, int, int, list[int]]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    def hold(
        self,
        lengths: NDArray[np.int64],
        keys: NDArray[np.uint64],
        worker: int,
        until_ms: float,
        registered_ms: float = -math.inf,
    ) -> None:
        """``worker`` holds (or will hold) the prefix of ``lengths[i]`` tokens (key ``keys[i]``)
        until at least ``until_ms``: at forward time with the predicted deadline, again when the
        response is back with the real one (a later deadline never shrinks). ``registered_ms``:
        when the worker's registration of it is produced (edge clock); once the view reflects
        every event of the key's shard produced up to then (``overlay``'s ``marks``), the view
        answers alone, deadline or not."""
        if not 0 <= worker < self.n_workers:
            raise InvalidInputError(f"expected worker in [0, {self.n_workers}), got {worker}")
        if lengths.shape != keys.shape:
            raise InvalidInputError(
                f"expected lengths and keys of one shape, got {lengths.shape}, {keys.shape}"
            )
        entries = self._entries
        held: list[int] = []
        for n, key in zip(lengths.tolist(), keys.tolist(), strict=True):
            holders = entries.get(key)
            if holders is None:
                holders = entries[key] = {}
            old = holders.get(worker)
            if old is None or old[0] < until_ms:
                reg = registered_ms if old is None else max(old[2], registered_ms)
                holders[worker] = (until_ms, n, reg)
                held.append(key)
        if held:
            self._seq += 1
            heapq.heappush(self._deadlines, (until_ms, self._seq, worker, held))

    def release(self, keys: NDArray[np.uint64], worker: int) -> None:
        """``worker`` will not hold these prefixes after all (the forward went elsewhere or
        failed): drop its pending entries for ``keys`` (others' entries stay)."""
        entries = self._entries
        for key in keys.tolist():
            holders = entries.get(key)
            if holders is not None and holders.pop(worker, None) is not None and not holders:
                del entries[key]

    def expire(self, now_ms: float) -> None:
        """Drop every entry whose deadline is at or before ``now_ms``."""
        entries, heap = self._entries, self._deadlines
        while heap and heap[0][0] <= now_ms:
            _, _, worker, keys = heapq.heappop(heap)
            for key in keys:
                holders = entries.get(key)
                if holders is None:
                    continue
                cur = holders.get(worker)
                if cur is not None and cur[0] <= now_ms:
                    del holders[worker]
                    if not holders:
                        del entries[key]

    def overlay(
        self,
        keys: NDArray[np.uint64],
        matched_tokens: NDArray[np.int64],
        tiers: NDArray[np.uint8],
        now_ms: float,
        marks: NDArray[np.float64] | None = None,
    ) -> tuple[NDArray[np.int64], NDArray[np.uint8], int]:
        """The view's (W,) answer raised by the pending prefixes among ``keys`` at ``now_ms``.

        ``marks[s]``: the view reflects every event of shard s produced up to then (its
        watermark, ``wire.patch_applier``); an entry whose registration is that old is the
        view's to answer and is dropped (confirmed, or never registered: evicted or lost).
        Returns (matched, tiers, raised): copies when something was raised (a raised worker's
        tier is VRAM: see the module docstring), the inputs themselves otherwise; ``raised`` is
        how many workers got a longer match.
        """
        self.expire(now_ms)
        entries = self._entries
        if not entries:
            return matched_tokens, tiers, 0
        best: dict[int, int] = {}
        n_marks = 0 if marks is None else int(marks.shape[0])
        for key in keys.tolist():
            holders = entries.get(key)
            if holders is None:
                continue
            mark = float(marks[key % n_marks]) if marks is not None and n_marks else -math.inf
            for w, (_, n, reg) in list(holders.items()):
                if -math.inf < reg <= mark:  # the view reflects its registration: it answers
                    del holders[w]
                    continue
                if n > best.get(w, 0):
                    best[w] = n
            if not holders:
                del entries[key]
        raised = [w for w, n in best.items() if n > int(matched_tokens[w])]
        if not raised:
            return matched_tokens, tiers, 0
        m, t = matched_tokens.copy(), tiers.copy()
        for w in raised:
            m[w] = best[w]
            t[w] = int(Tier.VRAM)
        return m, t, len(raised)
