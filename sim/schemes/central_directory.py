"""Central directory: exact global KV state in one region, one WAN round trip per lookup (§5.1 #4).

What the original design does: a single coordinator keeps the global map prefix -> holders (and
the workers' load); every edge asks it where to send each request and forwards there. Its
strength is exact, global state; its cost is that every request pays a wide-area round trip to
the coordinator before it is forwarded (paper §1, §5.2: "pays a WAN round trip to a single
coordinator per request, increasing TTFT").

What we model (its best configuration):

* Placement of the directory: the region with the smallest demand-weighted mean one-way latency
  from the origins (an operator places its coordinator where its users are; the demand mix is
  the run's origin distribution, known at deployment time), ties to the region with more
  workers; computed once from the static matrix.
* Lookup: ``Route.lookup_ms`` = 2 x ``network.one_way_ms(origin, directory)`` (an in-region
  origin pays the in-region hop twice).
* State: exact and live (``ctx.cluster``, allowed by the honesty rules for exact-global-state
  designs): every worker's true matched prefix and tier (``match_all``) and queued prefill
  (``backlog_ms``), read when the request reaches the edge (the directory decides half a round
  trip later; that small optimism is in its favour). The directory also knows what it itself
  assigned: work forwarded but not yet arrived at its worker (in flight over the WAN) is added to
  that worker's queue until the predicted arrival, so a burst does not pile onto one idle worker.
* Choice: the same joint score KVCompass uses (paper §3.4), with exact inputs (belief 1)::

      score(r) = RTT(o, r) + Tq(r) + (1 + λ)·β_r·(L − m_r) + γ·m_r·[t_r = DRAM]
      λ = min(λ_max, min_r Tq(r) / τ)

  with γ, τ and λ_max from ``kvcompass.router.RouterConfig`` defaults (the paper's values), so
  the only difference from KVCompass is where the state lives and how fresh it is.

Owns the directory placement and its in-flight bookkeeping; reads ``ctx.cluster`` (allowed for
this design) but never mutates it.
"""

from __future__ import annotations

import heapq

import numpy as np

from kvcompass.router.config import RouterConfig
from kvcompass.types import Tier
from sim.schemes.base import InformationError, Route, Scheme, SchemeContext


class CentralDirectory(Scheme):
    """One exact directory in the best-connected region; a WAN round trip per request."""

    name = "central_directory_ideal"
    exact_cache = True
    exact_queues = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        dep = ctx.deployment
        n_regions = int(dep.n_regions)
        self.one_way = np.array(
            [[ctx.network.one_way_ms(a, b) for b in range(n_regions)] for a in range(n_regions)],
            dtype=np.float64,
        )
        sizes = [r.n_workers for r in dep.regions]
        demand = np.bincount(
            np.asarray(ctx.requests.origin, dtype=np.int64), minlength=n_regions
        ).astype(np.float64)
        if demand.sum() <= 0:
            demand = np.ones(n_regions)
        mean = demand @ self.one_way / demand.sum()
        self.directory = int(min(range(n_regions), key=lambda d: (round(mean[d], 9), -sizes[d])))
        self.lookup = [2.0 * float(self.one_way[o, self.directory]) for o in range(n_regions)]
        region = np.asarray(ctx.cluster.worker_region, dtype=np.int64)
        self.worker_region = region
        self.n_workers = int(ctx.cluster.n_workers)
        wan = np.asarray(dep.wan_matrix_ms, dtype=np.float64)
        self.rtt_to = [2.0 * wan[o][region] for o in range(n_regions)]  # (W,) per origin
        self.forward_ms = [self.one_way[o][region] for o in range(n_regions)]
        self.beta = np.asarray(ctx.cost.prefill_ms_per_token, dtype=np.float64)
        cfg = RouterConfig()
        self.gamma = float(ctx.cost.reload_ms_per_token)
        self.tau = cfg.resolve_tau_ms(float(np.median(self.beta)))
        self.lambda_max = float(cfg.lambda_max)
        self.pending = np.zeros(self.n_workers, dtype=np.float64)
        self._inflight: list[tuple[float, int, float]] = []
        self.n_lookups = 0
        if ctx.exact_cache is None or ctx.exact_queues is None:
            raise InformationError(f"{self.name}: the engine gave no exact state")
        self._cache, self._queues = ctx.exact_cache, ctx.exact_queues

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        prompt = int(rq.prompt_len[req])
        inflight, pending = self._inflight, self.pending
        while inflight and inflight[0][0] <= now_ms:
            _, w, work = heapq.heappop(inflight)
            pending[w] -= work
        matched, tiers = self._cache.match_all(req)
        m = matched.astype(np.float64)
        tq = self._queues.backlog_ms(now_ms) + np.maximum(pending, 0.0)
        lam = min(self.lambda_max, float(tq.min()) / self.tau)
        reload = self.gamma * m * (tiers == Tier.DRAM)
        score = self.rtt_to[origin] + tq + (1.0 + lam) * self.beta * (prompt - m) + reload
        w = int(np.argmin(score))
        work = float(self.beta[w] * (prompt - m[w]) + reload[w])
        lookup = self.lookup[origin]
        arrive = now_ms + lookup + float(self.forward_ms[origin][w])
        pending[w] += work
        heapq.heappush(inflight, (arrive, w, work))
        self.n_lookups += 1
        return Route(
            worker=w,
            lookup_ms=lookup,
            claimed_tokens=int(matched[w]),
            claimed_tier=int(tiers[w]),
            extra={"lambda": lam, "queue_ms": float(tq[w])},
        )

    def finish(self) -> dict[str, float]:
        return {"directory_region": float(self.directory), "lookups": float(self.n_lookups)}
