"""Virtual clock and event queue of one run (SimPy-style: state on the instance, no globals).

Owns the clock and the heap of pending callbacks, ordered by ``(time, priority, seq)`` so two
events at the same virtual time fire in a reproducible order (lower priority first, then
scheduling order). Must not know requests, workers or schemes; callers schedule plain callables.

Request arrivals are not put on the heap: the runner replays them in arrival order and calls
``run_until(t)`` first, so every event due at or before the arrival fires before it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from kvcompass.errors import InvalidInputError

Callback = Callable[[float, Any], None]

# Priorities of the engine's own events (lower fires first at equal times).
PRIO_DELIVERY = 2
"""Control messages (index patches, queue vectors) land before work is decided at that instant."""
PRIO_WORKER = 4
"""A request reaching its worker."""
PRIO_DEFAULT = 5
PRIO_RESPONSE = 6


class EventLoop:
    """A heap of ``(time, priority, seq, callback, arg)``; ``now_ms`` only moves forward."""

    __slots__ = ("_heap", "_seq", "n_fired", "now_ms")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, Callback, Any]] = []
        self._seq = 0
        self.now_ms = 0.0
        self.n_fired = 0

    def schedule(
        self, at_ms: float, fn: Callback, arg: Any = None, priority: int = PRIO_DEFAULT
    ) -> None:
        """Call ``fn(at_ms, arg)`` at virtual time ``at_ms`` (never in the past)."""
        if at_ms < self.now_ms:
            if at_ms < self.now_ms - 1e-6:
                raise InvalidInputError(
                    f"event time must be >= now ({self.now_ms:.6f} ms), got {at_ms:.6f} ms"
                )
            at_ms = self.now_ms
        self._seq += 1
        heapq.heappush(self._heap, (at_ms, priority, self._seq, fn, arg))

    def run_until(self, t_ms: float) -> None:
        """Fire every event due at or before ``t_ms``, then set the clock to ``t_ms``."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= t_ms:
            at, _, _, fn, arg = pop(heap)
            self.now_ms = at
            self.n_fired += 1
            fn(at, arg)
        if t_ms > self.now_ms:
            self.now_ms = t_ms

    def run_all(self, horizon_ms: float = float("inf")) -> None:
        """Drain the queue (events beyond ``horizon_ms`` are dropped: periodic timers)."""
        heap = self._heap
        pop = heapq.heappop
        while heap and heap[0][0] <= horizon_ms:
            at, _, _, fn, arg = pop(heap)
            self.now_ms = at
            self.n_fired += 1
            fn(at, arg)
        heap.clear()

    def __len__(self) -> int:
        return len(self._heap)
