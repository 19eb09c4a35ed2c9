"""The booking of one region's workers by that region's edge: an exact queue model of its own.

Owns, for the edge of region R under route-and-reserve, every forward it dispatched to each of
R's workers that has not produced its first token yet, and from them the time each worker's
FIFO drains. R's edge is the booking authority of R's workers: every request bound for them
passes through it (local requests start there; remote origins relay theirs to it), so it knows
every forward, without WAN delay, the moment it is sent. Must not score or talk to anything.

Model (the simulator's and a prefill-bound engine's: one prefill at a time, FIFO by arrival)::

    book f:         arrive_f = now + hop;   drain_w = max(drain_w, arrive_f) + work_f
    first token f:  finish_f = now − hop;   every forward booked before f on w is done too
                    (FIFO), so drain_w is recomputed from finish_f over the forwards booked
                    after f: the prediction error of f and those ahead of it is gone
    reading (T, q): waiting work q at T is a lower bound (the engine's report leaves out part
                    of the prefill running at T): drain_w >= T + q + work of open forwards
                    landing after T; the booked drain and this bound are combined with max,
                    until a first token comes back after T (it knows better: the latest of the
                    two events wins)

so a new forward dispatched at ``now`` waits ``max(0, drain_w − (now + hop))``. A reading only
ever raises the estimate: work the edge did not book (a migration's recompute, a request
sent around the edge) shows up there, and a prediction that was too low is corrected at the
next reading or first token, whichever comes first. Every ``book`` must end in exactly one
``retire`` (first token) or ``cancel`` (the send failed); ``retire`` of a forward already
dropped (it was ahead of one that finished) is a no-op.

A worker's open forwards are kept in arrival order (its FIFO's): "booked before f" above means
"landed before f". For a region's edge (one hop to every worker) that is booking order; a
booker whose forwards travel unequal paths (the simulator's central directory, one booking over
every worker with ``hop_ms`` 0, passing each forward's landing time as ``now_ms`` of ``book``
and its prefill's end as ``now_ms`` of ``retire``) gets the engine's order too.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError


class RegionBooking:
    """Open forwards per worker of one region and each worker's predicted drain time."""

    __slots__ = (
        "_after",
        "_anchor",
        "_drain",
        "_open",
        "_read_at",
        "_read_q",
        "_slot",
        "_where",
        "hop_ms",
        "workers",
    )

    def __init__(self, workers: NDArray[np.int64], hop_ms: float) -> None:
        if not (math.isfinite(hop_ms) and hop_ms >= 0):
            raise InvalidInputError(f"expected hop_ms finite >= 0, got {hop_ms}")
        self.workers = np.asarray(workers, dtype=np.int64)
        self.hop_ms = float(hop_ms)
        n = self.workers.shape[0]
        self._slot = {int(w): i for i, w in enumerate(self.workers.tolist())}
        self._open: list[dict[int, tuple[float, float]]] = [{} for _ in range(n)]
        self._drain = [-math.inf] * n
        """Booked drain time per worker: every open forward served after the anchor."""
        self._anchor = [-math.inf] * n
        """Finish time of the latest forward whose first token came back, per worker."""
        self._read_at = [-math.inf] * n
        self._read_q = [0.0] * n
        self._after = [0.0] * n
        """Work of the open forwards landing after the last reading, per worker."""
        self._where: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._where)

    def slot(self, worker: int) -> int:
        """Position of ``worker`` in ``workers`` (InvalidInputError if not this region's)."""
        i = self._slot.get(worker)
        if i is None:
            raise InvalidInputError(f"expected a worker of {self.workers.tolist()}, got {worker}")
        return i

    def book(self, forward: int, worker: int, now_ms: float, work_ms: float) -> float:
        """Dispatch ``forward`` (``work_ms`` of predicted prefill) to ``worker`` at ``now_ms``;
        returns its arrival at the worker."""
        if forward in self._where:
            raise InvalidInputError(f"forward {forward} is already booked")
        if not (math.isfinite(work_ms) and work_ms >= 0):
            raise InvalidInputError(f"expected work_ms finite >= 0, got {work_ms}")
        i = self.slot(worker)
        arrive = now_ms + self.hop_ms
        opened = self._open[i]
        last = next(reversed(opened.values()), None) if opened else None
        opened[forward] = (arrive, work_ms)
        self._where[forward] = i
        if last is not None and arrive < last[0]:
            # It lands before forwards booked earlier (a booker whose forwards travel unequal
            # paths, e.g. a central directory): keep the worker's open forwards in arrival
            # order, its FIFO's, so ``retire`` and the drain follow the engine's order.
            self._open[i] = dict(sorted(opened.items(), key=lambda kv: kv[1][0]))
            self._recount(i)
            return arrive
        self._drain[i] = max(self._drain[i], arrive) + work_ms
        if arrive > self._read_at[i]:
            self._after[i] += work_ms
        return arrive

    def retire(self, forward: int, now_ms: float) -> int:
        """``forward``'s first token reached the edge at ``now_ms``: it and every forward booked
        before it on its worker are done. Returns the worker (-1: not open here)."""
        i = self._where.pop(forward, -1)
        if i < 0:
            return -1
        opened = self._open[i]
        for f in list(opened):
            del opened[f]
            if f == forward:
                break
            self._where.pop(f, None)
        self._anchor[i] = max(self._anchor[i], now_ms - self.hop_ms)
        self._recount(i)
        return int(self.workers[i])

    def cancel(self, forward: int) -> int:
        """``forward`` never reached its worker: forget it. Returns the worker (-1: not open)."""
        i = self._where.pop(forward, -1)
        if i < 0:
            return -1
        del self._open[i][forward]
        self._recount(i)
        return int(self.workers[i])

    def on_reading(self, worker: int, queue_ms: float, taken_ms: float) -> None:
        """The engine reported ``queue_ms`` of waiting work at ``taken_ms`` (a newer reading of
        the same worker replaces an older one; an older one is ignored)."""
        if not (math.isfinite(queue_ms) and queue_ms >= 0):
            raise InvalidInputError(f"expected queue_ms finite >= 0, got {queue_ms}")
        i = self.slot(worker)
        if taken_ms < self._read_at[i]:
            return
        self._read_at[i] = taken_ms
        self._read_q[i] = queue_ms
        self._after[i] = sum(s for a, s in self._open[i].values() if a > taken_ms)

    def drain_ms(self) -> NDArray[np.float64]:
        """(n,) when each worker's FIFO is predicted to drain (-inf: never used)."""
        return np.array(
            [
                max(d, t + q + a) if t >= anchor else d
                for d, t, q, a, anchor in zip(
                    self._drain, self._read_at, self._read_q, self._after, self._anchor, strict=True
                )
            ],
            dtype=np.float64,
        )

    def waits(self, now_ms: float) -> NDArray[np.float64]:
        """(n,) wait of a forward dispatched at ``now_ms`` (it lands one hop later)."""
        return np.maximum(self.drain_ms() - (now_ms + self.hop_ms), 0.0)

    def backlog(self, now_ms: float) -> NDArray[np.float64]:
        """(n,) work still ahead of each worker at ``now_ms``: the region's queue vector."""
        return np.maximum(self.drain_ms() - now_ms, 0.0)

    def read_at(self, worker: int) -> float:
        """When ``worker``'s latest reading was taken (-inf: none yet)."""
        return float(self._read_at[self.slot(worker)])

    def open_forwards(self, worker: int) -> int:
        """How many forwards to ``worker`` have not produced their first token."""
        return len(self._open[self.slot(worker)])

    def _recount(self, i: int) -> None:
        drain = self._anchor[i]
        after = 0.0
        t = self._read_at[i]
        for arrive, work in self._open[i].values():
            drain = max(drain, arrive) + work
            if arrive > t:
                after += work
        self._drain[i] = drain
        self._after[i] = after
