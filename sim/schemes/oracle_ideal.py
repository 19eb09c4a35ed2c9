"""``oracle_ideal``: exact global cache and queue state, no lookup cost, lowest predicted TTFT.

A reference, not a baseline (issue 14): for each request it reads every worker's true matched
prefix and tier (``match_all``) and true backlog (``backlog_ms``) at arrival, adds the work it has
itself sent that is still crossing the WAN (like the paper's ``oracle``), and picks the worker
with the lowest predicted TTFT under the simulator's own cost model (``sim/README``)::

    TTFT(w) = WAN(o→r_w) + max(backlog_w + in_flight_w − WAN(o→r_w), 0)
              + β_w·(L − m_w) + γ·m_w·[tier_w = DRAM] + WAN(r_w→o)

(no lookup term: it pays none). It still decides greedily, one request at a time, and does not
see the cache effect of requests it sent that have not reached their worker, so it bounds what
exact knowledge buys a greedy router, not the optimum. Named ``*_ideal``: shown apart, never
counted as a win. Declares ``exact_cache`` and ``exact_queues`` (allowed for ``*_ideal``
references only, ``sim.schemes.base``).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from kvcompass import costs
from kvcompass.router.forwards import ForwardLedger
from sim.schemes.base import InformationError, Route, Scheme, SchemeContext


class OracleIdeal(Scheme):
    """argmin over all workers of the exactly predicted TTFT."""

    name: ClassVar[str] = "oracle_ideal"
    exact_cache: ClassVar[bool] = True
    exact_queues: ClassVar[bool] = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        wan = np.asarray(ctx.cost.wan_one_way_ms, dtype=np.float64)
        region = np.asarray(ctx.cluster.worker_region, dtype=np.int64)
        self._out = np.ascontiguousarray(wan[:, region])  # edge of o -> worker w
        self._back = np.ascontiguousarray(wan[region, :].T)  # worker w -> edge of o
        self._beta = np.asarray(ctx.cost.prefill_ms_per_token, dtype=np.float64)
        self._gamma = float(ctx.cost.reload_ms_per_token)
        self._ledger = ForwardLedger(int(ctx.cluster.n_workers))
        if ctx.exact_cache is None or ctx.exact_queues is None:
            raise InformationError(f"{self.name}: the engine gave no exact state")
        self._cache, self._queues = ctx.exact_cache, ctx.exact_queues

    def route(self, req: int, now_ms: float) -> Route:
        ledger = self._ledger
        ledger.forget_landed(now_ms)
        inflight = ledger.pending_after(now_ms)
        rq = self.ctx.requests
        o = int(rq.origin[req])
        prompt = int(rq.prompt_len[req])
        matched, tiers = self._cache.match_all(req)
        m = matched.astype(np.float64)
        out = self._out[o]
        work = costs.prefill_ms(self._beta, prompt - m, self._gamma, m * (tiers == 2))
        wait = np.maximum(self._queues.backlog_ms(now_ms) + inflight - out, 0.0)
        ttft = out + wait + work + self._back[o]
        w = int(np.argmin(ttft))
        ledger.add(w, now_ms + float(out[w]), float(work[w]))
        return Route(
            worker=w,
            claimed_tokens=int(matched[w]),
            claimed_tier=int(tiers[w]),
            extra={"predicted_ttft_ms": float(ttft[w])},
        )
