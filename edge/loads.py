"""Live queue readings of the edge's own region: poll each local worker's ``GET /v1/loads``.

Owns the poll loop (every ``loads_poll_period_ms``, the Δ of the local channel) that feeds the
decider's ``on_local_loads`` (with the time each reading was taken, this edge's clock). The
estimate per worker is the region load reporter's (``kvcompass.router.load_report
.worker_queue_ms``: waiting uncached tokens × measured prefill ms/token), so the edge's live
local reading and the vector other regions receive agree. Each answer is given to the decider
at once (under route-and-reserve a reading only raises the booking's estimate:
``kvcompass.decider.booking``); a worker that does not answer in time keeps its
previous estimate, so it ages instead of being reset to a stale value (staleness is a metric).
The timeout is ``max(3 Δ, 1 s)``: a busy host answers late, and a late reading is still
better than none; slow polls never overlap (the next starts after the previous ends). Must not
route.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np

from edge.app import EdgeApp
from kvcompass.router.config import load_poll_timeout_ms
from kvcompass.router.load_report import worker_queue_ms


class LocalLoads:
    """Polls the local workers that have a direct route."""

    def __init__(self, edge: EdgeApp) -> None:
        self.edge = edge
        svc = edge.service
        self.local = svc.deployment.workers_of(svc.origin).tolist()
        beta = np.asarray(svc.deployment.prefill_ms_per_token, dtype=np.float64)
        self.beta = float(beta[svc.origin])
        self.values = np.zeros(len(self.local), dtype=np.float64)
        self.polls = 0

    async def _one(self, i: int, worker: int, timeout_s: float) -> None:
        fwd = self.edge.forwarder
        route = fwd.routes.get(worker)
        if route is None or route.relayed:
            return
        taken = self.edge.service.clock_ms()  # the reading is at least this fresh
        try:
            report = await fwd.get_json(worker, "/v1/loads", timeout_s)
        except Exception as exc:  # any failure: keep the last reading, count it
            self.edge.service.metrics.inc("errors_total", type=f"loads-{type(exc).__name__}")
            return
        if not isinstance(report, dict):
            self.edge.service.metrics.inc("errors_total", type="loads-malformed")
            return
        q = worker_queue_ms(report, self.beta)
        self.values[i] = q
        self.edge.service.on_local_loads(np.array([worker], np.int64), np.array([q]), taken)

    async def poll_once(self) -> None:
        timeout_s = load_poll_timeout_ms(self.edge.config.loads_poll_period_ms) / 1000.0
        await asyncio.gather(*(self._one(i, w, timeout_s) for i, w in enumerate(self.local)))
        self.polls += 1

    async def run(self, stop: asyncio.Event) -> None:
        period_s = self.edge.config.loads_poll_period_ms / 1000.0
        if period_s <= 0 or not self.local:
            return
        while not stop.is_set():
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period_s)
