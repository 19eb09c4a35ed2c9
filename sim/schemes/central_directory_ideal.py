"""``central_directory_ideal``: the central directory with exact, live global state (a reference).

The directory of ``sim.schemes.central_directory`` (same placement, round trip and joint score)
but reading every worker's true matched prefix and tier (``match_all``) and true backlog
(``backlog_ms``) at the moment the request reaches the edge, with no report or event delay. It
also counts the work it sent that is still crossing the WAN (not in any queue yet), and charges
the DRAM reload ``γ·m`` of a DRAM-tier match. No real directory has this view (its state comes
from reports that cross the WAN), so this is an idealised reference: named ``*_ideal``, shown
apart in results, never counted as a win. Declares ``exact_cache`` and ``exact_queues`` (allowed
only for ``*_ideal`` references, ``sim.schemes.base``).
"""

from __future__ import annotations

from typing import ClassVar

from kvcompass.router.forwards import ForwardLedger
from kvcompass.types import Tier
from sim.schemes.base import InformationError, Route, Scheme, SchemeContext
from sim.schemes.central_directory import DirectoryPlacement


class CentralDirectoryIdeal(Scheme):
    """One exact directory in the best-connected region; a WAN round trip per request."""

    name = "central_directory_ideal"
    exact_cache: ClassVar[bool] = True
    exact_queues: ClassVar[bool] = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        self.place = DirectoryPlacement(ctx)
        self.ledger = ForwardLedger(int(ctx.cluster.n_workers))
        self.n_lookups = 0
        if ctx.exact_cache is None or ctx.exact_queues is None:
            raise InformationError(f"{self.name}: the engine gave no exact state")
        self._cache, self._queues = ctx.exact_cache, ctx.exact_queues

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        prompt = int(rq.prompt_len[req])
        # Work it sent that has not reached its worker is in no backlog yet (the core's ledger).
        ledger = self.ledger
        ledger.forget_landed(now_ms)
        matched, tiers = self._cache.match_all(req)
        tq = self._queues.backlog_ms(now_ms) + ledger.pending_after(now_ms)
        w, lam = self.place.choose(origin, prompt, matched, tiers, tq, tier_aware=True)
        m = int(matched[w])
        work = self.place.work_ms(w, prompt, m, m if tiers[w] == Tier.DRAM else 0)
        lookup = self.place.lookup[origin]
        arrive = now_ms + lookup + float(self.place.forward_ms[origin][w])
        ledger.add(w, arrive, work)
        self.n_lookups += 1
        return Route(
            worker=w,
            lookup_ms=lookup,
            claimed_tokens=int(matched[w]),
            claimed_tier=int(tiers[w]),
            extra={"lambda": lam, "queue_ms": float(tq[w])},
        )

    def finish(self) -> dict[str, float]:
        return {"directory_region": float(self.place.region), "lookups": float(self.n_lookups)}
