"""The in-region load poll of every region's edge: the simulator's twin of ``edge/loads.py``.

Owns when each region's queue readings are taken and when they reach that region's edge. A real
edge polls ``GET /v1/loads`` of its local workers, waits for every answer (or the timeout), then
sleeps one period before the next poll (polls never overlap). Here, per region: the poll leaves
at ``t``; every worker answers with its backlog at ``t + h`` (``h`` = the deployment's in-region
one-way hop); the answers are back at ``t + 2h``; the next poll leaves at ``t + 2h + period``.
The timeout (``kvcompass.router.config.load_poll_timeout_ms``, the edge's) never fires here: a
simulated worker always answers within ``2h``, far below it; it is carried so schemes and the
README state the same rule as the edge.

Readings go to every subscriber of the region (``subscribe``) and are kept as the region's
``last`` reading: the vector the region's load reporter broadcasts and its edge piggybacks on
cross-region responses. The reported value is the simulated worker's backlog (ms until its FIFO
drains, including the remainder of the prefill running now; the real reporter leaves that
remainder out, see ``workers/load_reporter.py``). Must not route or know schemes; polls stop at
the horizon (the last arrival), after which no decision is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from kvcompass.router.config import load_poll_timeout_ms
from sim.engine.loop import PRIO_DELIVERY, EventLoop
from sim.schemes.base import LoadReading


class _Backlogs(Protocol):
    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]: ...


class RegionLoadPoll:
    """One run's load polls, one cycle per region (implements ``schemes.base.LoadPoll``)."""

    def __init__(
        self,
        cluster: _Backlogs,
        workers_of: list[NDArray[np.int64]],
        hop_ms: float,
        period_ms: float,
        loop: EventLoop,
        horizon_ms: float,
    ) -> None:
        self.period_ms = float(period_ms)
        self.timeout_ms = load_poll_timeout_ms(self.period_ms)
        self._cluster = cluster
        self._workers_of = workers_of
        self._hop = float(hop_ms)
        self._loop = loop
        self._horizon = float(horizon_ms)
        self._subs: list[list[Callable[[LoadReading], None]]] = [[] for _ in workers_of]
        self._last: list[LoadReading | None] = [None] * len(workers_of)
        self.polls = 0

    def start(self) -> None:
        """Every region's first poll leaves at time 0 (edges start with the run)."""
        for r, ws in enumerate(self._workers_of):
            if ws.size:
                self._loop.schedule(0.0, self._leave, r, PRIO_DELIVERY)

    def subscribe(self, region: int, deliver: Callable[[LoadReading], None]) -> None:
        self._subs[region].append(deliver)

    def last(self, region: int) -> LoadReading | None:
        return self._last[region]

    def _leave(self, at: float, region: int) -> None:
        if at > self._horizon:
            return
        self._loop.schedule(at + self._hop, self._answer, region, PRIO_DELIVERY)

    def _answer(self, at: float, region: int) -> None:
        ws = self._workers_of[region]
        values = self._cluster.backlog_ms(at)[ws]
        reading = LoadReading(region, ws, values, at, at + self._hop)
        self._loop.schedule(at + self._hop, self._back, reading, PRIO_DELIVERY)

    def _back(self, at: float, reading: LoadReading) -> None:
        self.polls += 1
        self._last[reading.region] = reading
        for deliver in self._subs[reading.region]:
            deliver(reading)
        self._loop.schedule(at + self.period_ms, self._leave, reading.region, PRIO_DELIVERY)
