"""Oracle: every request goes to the least-loaded worker of the whole pool (paper §5.3).

The load-balance lower bound of Fig. 14: it reads every worker's exact backlog live (no
staleness, no discovery cost) and sends the request where it will wait least once it gets there.
Being omniscient it also counts the work it has itself sent that is still crossing the WAN
(requests in flight are not in any worker's queue yet; without them the Oracle would herd onto
one idle remote worker for a whole WAN delay), in the core's ``ForwardLedger``. That in-flight
work is charged at the full prefill ``β·L`` (the Oracle ignores reuse on purpose: it is the
bound on balance, not on reuse). Ties — typically many idle workers at low load — go to the
nearest worker, so the Oracle does not pay WAN for nothing.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kvcompass import costs
from kvcompass.router.forwards import ForwardLedger
from sim.schemes.base import InformationError, Route, Scheme, SchemeContext


class Oracle(Scheme):
    """argmin over all workers of (wait at arrival incl. in-flight work, one-way WAN)."""

    name: ClassVar[str] = "oracle"
    exact_queues: ClassVar[bool] = True  # the load-factor floor reads exact backlogs (§5.3)

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        wan = ctx.cost.wan_one_way_ms
        region = ctx.cluster.worker_region
        # one_way[o, w]: edge of region o -> worker w
        self._one_way = np.ascontiguousarray(wan[:, region])
        self._origin = ctx.requests.origin.tolist()
        self._prompt = ctx.requests.prompt_len.tolist()
        self._beta = ctx.cost.prefill_ms_per_token.tolist()
        self._ledger = ForwardLedger(ctx.cluster.n_workers)
        if ctx.exact_queues is None:
            raise InformationError("oracle: the engine gave no exact queues")
        self._queues = ctx.exact_queues

    def route(self, req: int, now_ms: float) -> Route:
        ledger = self._ledger
        ledger.forget_landed(now_ms)
        o = self._origin[req]
        ow = self._one_way[o]
        inflight = ledger.pending_after(now_ms)
        wait = np.maximum(self._queues.backlog_ms(now_ms) + inflight - ow, 0.0)
        # lexicographic (wait, WAN): WAN is < 1e3 ms, so scale it below any real wait difference
        w = int(np.argmin(wait + ow * 1e-9))
        ms = costs.prefill_ms(self._beta[w], self._prompt[req], 0.0, 0.0)  # reuse ignored
        ledger.add(w, now_ms + float(ow[w]), ms)
        return Route(worker=w)
