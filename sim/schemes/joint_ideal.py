"""``joint_ideal``: KVCompass's own joint score with exact caches and queues, no lookup or sync.

A reference, not a baseline (issue 34 item 4): the bound on what KVCompass's decision rule can
reach from information alone. For each request, at its origin's edge at arrival, it reads every
worker's true matched prefix and tier (``match_all``) and true backlog (``backlog_ms``), adds
the work it has itself sent that is still crossing the WAN (the core's ``ForwardLedger``, not
in any backlog yet), and picks with the core's joint score (``kvcompass.router.score``, the
kernel every ``Decider`` runs; belief 1, tier-aware, τ and λ_max from ``RouterConfig``)::

    score(w) = RTT(o, r_w) + Tq(w) + (1 + λ)·β_w·(L − m_w) + γ·m_w·[tier_w = DRAM],
    λ = min(λ_max, min_w Tq(w) / τ)

No lookup cost, no index or vector delay, no relay or refusal: what is left between KVCompass
and this row is what its information costs it (the headroom column of the results tables,
ours ÷ ``joint_ideal``). Like ``oracle_ideal`` it decides greedily and does not see the cache
effect of requests still on their way. Named ``*_ideal``: shown apart, never counted as a win.
Declares ``exact_cache`` and ``exact_queues`` (``sim.schemes.base``).
"""

from __future__ import annotations

from typing import ClassVar

from kvcompass.router.forwards import ForwardLedger
from kvcompass.types import Tier
from sim.schemes.base import InformationError, Route, Scheme, SchemeContext
from sim.schemes.central_directory import DirectoryPlacement


class JointIdeal(Scheme):
    """The joint score over every worker with exact live state, at the origin, for free."""

    name: ClassVar[str] = "joint_ideal"
    exact_cache: ClassVar[bool] = True
    exact_queues: ClassVar[bool] = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        # The placement's scorer (the core kernel, RouterConfig's τ and λ_max); its directory
        # region is not used: nothing is looked up.
        self.score = DirectoryPlacement(ctx)
        self.ledger = ForwardLedger(int(ctx.cluster.n_workers))
        if ctx.exact_cache is None or ctx.exact_queues is None:
            raise InformationError(f"{self.name}: the engine gave no exact state")
        self._cache, self._queues = ctx.exact_cache, ctx.exact_queues

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        prompt = int(rq.prompt_len[req])
        ledger = self.ledger
        ledger.forget_landed(now_ms)
        matched, tiers = self._cache.match_all(req)
        tq = self._queues.backlog_ms(now_ms) + ledger.pending_after(now_ms)
        w, lam = self.score.choose(origin, prompt, matched, tiers, tq, tier_aware=True)
        m = int(matched[w])
        work = self.score.work_ms(w, prompt, m, m if tiers[w] == Tier.DRAM else 0)
        ledger.add(w, now_ms + float(self.score.forward_ms[origin][w]), work)
        return Route(
            worker=w,
            claimed_tokens=m,
            claimed_tier=int(tiers[w]),
            extra={"lambda": lam, "queue_ms": float(tq[w])},
        )
