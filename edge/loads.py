"""Live queue readings of the edge's own region: poll each local worker's ``GET /v1/loads``.

Owns the poll loop (every ``loads_poll_period_ms``, the Δ of the local channel) that feeds
``Router.set_local_queues``. The estimate per worker is the region load reporter's
(``workers.load_reporter.worker_queue_ms``: waiting uncached tokens × measured prefill ms/token),
so the edge's live local reading and the vector other regions receive agree. A worker that does
not answer keeps its previous reading (it ages; staleness is a metric). Must not route.
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np

from edge.app import EdgeApp
from workers.load_reporter import worker_queue_ms


class LocalLoads:
    """Polls the local workers that have a direct route."""

    def __init__(self, edge: EdgeApp) -> None:
        self.edge = edge
        svc = edge.service
        self.local = svc.router.queue_view.local_workers.tolist()
        beta = np.asarray(svc.deployment.prefill_ms_per_token, dtype=np.float64)
        self.beta = float(beta[svc.origin])
        self.values = np.zeros(len(self.local), dtype=np.float64)
        self.polls = 0

    async def _one(self, i: int, worker: int, timeout_s: float) -> None:
        fwd = self.edge.forwarder
        route = fwd.routes.get(worker)
        if route is None or route.relayed:
            return
        try:
            report = await fwd.get_json(worker, "/v1/loads", timeout_s)
        except Exception as exc:  # any failure: keep the last reading, count it
            self.edge.service.metrics.inc("errors_total", type=f"loads-{type(exc).__name__}")
            return
        if isinstance(report, dict):
            self.values[i] = worker_queue_ms(report, self.beta)

    async def poll_once(self) -> None:
        period_s = max(self.edge.config.loads_poll_period_ms, 10.0) / 1000.0
        await asyncio.gather(*(self._one(i, w, period_s) for i, w in enumerate(self.local)))
        svc = self.edge.service
        svc.router.set_local_queues(self.values, svc.clock_ms())
        self.polls += 1

    async def run(self, stop: asyncio.Event) -> None:
        period_s = self.edge.config.loads_poll_period_ms / 1000.0
        if period_s <= 0 or not self.local:
            return
        while not stop.is_set():
            await self.poll_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), period_s)
