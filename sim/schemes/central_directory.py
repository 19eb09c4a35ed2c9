"""Central directory: global KV state in one region, one WAN round trip per request (§5.1 #4).

What the original design does: a single coordinator keeps the global map prefix -> holders and
the workers' load; every edge asks it where to send each request and forwards there (paper §1:
"each query pays a wide-area round trip that adds directly to TTFT"; §5.2: "pays a WAN round
trip to a single coordinator per request"). Its strength is one global view; its costs are the
round trip and that the view is as old as the reports that built it.

What we model (its best configuration):

* Placement: the region with the smallest demand-weighted mean one-way latency from the origins
  (an operator places its coordinator where its users are; the demand mix is the run's origin
  distribution, known at deployment time), ties to the region with more workers.
* Lookup: ``Route.lookup_ms`` = 2 x ``one_way(origin, directory)`` (edge -> directory -> edge).
  The paper states no per-lookup service time, so none is charged. The directory decides when
  the query reaches it, ``t_d = now + one_way(origin, directory)``.
* Cache state: the workers' cache events (``CacheEventBatch`` chunks stored / evicted), each
  reaching the directory ``one_way(worker region, directory)`` after emission (``HolderHistory``
  read as of ``t_d − one_way(r, d)`` per holder region r). Events carry no tier the directory
  keeps, so a held prefix is scored as VRAM (the DRAM reload γ is 6% of β: small).
* Queue state: each region's load poll (``ctx.loads``: the workers' backlogs every Δ = 100 ms,
  the readings KVCompass's queue vectors are built from) is forwarded to the directory as it
  completes and arrives one jittered one-way WAN later (``network.sample_ms``; report loss is
  not modelled, in the directory's favour). At ``t_d`` the directory uses, per region, the
  newest report that has arrived, drained by the time since it was taken.
* In flight (issue 34): the directory makes every routing decision, so it keeps a ledger of
  every forward it dispatched until that forward's first token, as the central routers people
  run do (SGLang's gateway counts each worker's running requests, Dynamo's router its active
  prefill blocks until the first token). The ledger is the project's one booking
  implementation, ``kvcompass.decider.RegionBooking``, here one booking over every worker
  (``hop_ms`` 0: each forward booked at its landing time at the worker, edge -> directory ->
  edge -> worker, with its predicted prefill ``β·(L − m)``). The serving side sees the first
  token one in-region hop after the prefill ends (``on_served``) and tells the directory, one
  jittered one-way WAN(r, d) later; the directory retires the forward then (it and every
  forward that landed before it on that worker are done, FIFO) and anchors the worker's drain
  at the real finish. Reports raise the estimate (work it did not book), as for KVCompass's
  booking. What it learns between the request's arrival at the edge and ``t_d`` is applied
  when ``route`` runs, so a first token told to it in that window is missed (against it), and
  one told before a later request's ``t_d`` but after an earlier-routed one's is seen by that
  earlier ``route`` call (for it): both are under one WAN one-way.
* ``central_directory_no_booking`` (an ablation, never a baseline a verdict compares with):
  the directory before issue 34, which counted a forward only until a report taken after its
  arrival and then knew the worker only through SGLang's ``num_waiting_uncached_tokens``
  (which leaves out the running prefill: ``sim.engine.loads``). The core's ``ForwardLedger``.
* Choice: the same joint score KVCompass uses (paper §3.4), called from the core
  (``kvcompass.router.score.score_workers``), belief 1::

      score(r) = RTT(o, r) + Tq(r) + (1 + λ)·β_r·(L − m_r),   λ = min(λ_max, min_r Tq(r) / τ)

  with τ and λ_max from ``kvcompass.router.RouterConfig`` (the paper's values), so the only
  differences from KVCompass are where the state lives and how it travels.
* Clock: one, the directory's; report times are compared with it unskewed (KVCompass's edges
  get ``SimConfig.edge_clock_skew_ms``; a real directory comparing its pollers' stamps would
  suffer the same: not modelled, in its favour).

``central_directory_ideal`` (``sim.schemes.central_directory_ideal``) is the same directory with
exact live cache and queue state: a reference, never counted as a win. Owns the directory
placement, its delayed views and its in-flight bookkeeping; reads no exact state.
"""

from __future__ import annotations

import heapq
from abc import abstractmethod
from bisect import bisect_right
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from kvcompass import costs
from kvcompass.decider import RegionBooking
from kvcompass.router import score as sc
from kvcompass.router.config import RouterConfig
from kvcompass.router.forwards import ForwardLedger
from sim.schemes._holders import HolderHistory, bits_of
from sim.schemes.base import (
    CacheEventBatch,
    LoadReading,
    Response,
    Route,
    Scheme,
    SchemeContext,
)


class DirectoryPlacement:
    """Where the directory sits, what a lookup costs, and the joint score's constants."""

    def __init__(self, ctx: SchemeContext) -> None:
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
        self.region = int(min(range(n_regions), key=lambda d: (round(mean[d], 9), -sizes[d])))
        self.lookup = [2.0 * float(self.one_way[o, self.region]) for o in range(n_regions)]
        self.worker_region = np.asarray(ctx.cluster.worker_region, dtype=np.int64)
        wan = np.asarray(dep.wan_matrix_ms, dtype=np.float64)
        self.rtt_to = [2.0 * wan[o][self.worker_region] for o in range(n_regions)]
        self.forward_ms = [self.one_way[o][self.worker_region] for o in range(n_regions)]
        self.beta = np.asarray(ctx.cost.prefill_ms_per_token, dtype=np.float64)
        self.gamma = float(ctx.cost.reload_ms_per_token)
        cfg = RouterConfig()
        self.tau = cfg.resolve_tau_ms(float(np.median(self.beta)))
        self.lambda_max = float(cfg.lambda_max)
        # The core's joint score (``kvcompass.router.score``), belief 1, no herding term: the
        # directory's queue estimate already holds its in-flight work.
        self._state = np.zeros((sc.N_STATE_ROWS, self.worker_region.shape[0]), np.float64)
        self._state[sc.ROW_BETA] = self.beta
        self._state[sc.ROW_BELIEF] = 1.0
        self._params = np.zeros(sc.N_PARAMS, np.float64)
        self._params[[sc.P_GAMMA, sc.P_TAU, sc.P_LAMBDA_MAX]] = (
            self.gamma,
            self.tau,
            self.lambda_max,
        )
        self._params[[sc.P_LOAD, sc.P_XREGION]] = 1.0

    def choose(
        self,
        origin: int,
        prompt: int,
        matched: NDArray[np.int64],
        tiers: NDArray[np.uint8],
        tq: NDArray[np.float64],
        tier_aware: bool = False,
    ) -> tuple[int, float]:
        """(worker, λ) of the joint score over every worker (``score.score_workers``);
        ``tier_aware``: charge the DRAM reload γ·m of a DRAM-tier match."""
        state = self._state
        state[sc.ROW_QUEUE] = tq
        state[sc.ROW_WAN] = self.rtt_to[origin]
        self._params[sc.P_TIER] = float(tier_aware)
        _, lam, winner = sc.score_workers(prompt, matched, tiers, state, self._params)
        return winner, lam

    def work_ms(self, worker: int, prompt: int, matched: int, reloaded: int = 0) -> float:
        """Predicted prefill of ``prompt`` at ``worker`` holding ``matched`` (``costs``)."""
        return float(costs.prefill_ms(self.beta[worker], prompt - matched, self.gamma, reloaded))


class _Directory(Scheme):
    """The directory's placement, its delayed cache view and its queue reports (both variants)."""

    wants_cache_events: ClassVar[bool] = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        self.place = DirectoryPlacement(ctx)
        d = self.place.region
        self.n_workers = int(ctx.cluster.n_workers)
        self.chunk = int(ctx.cluster.chunk_tokens)
        region = self.place.worker_region
        n_regions = int(ctx.deployment.n_regions)
        self.to_dir = self.place.one_way[:, d].copy()  # report / event delay from each region
        self.to_dir_w = self.to_dir[region]
        self.period_ms = float(ctx.loads.period_ms)
        max_ow = float(self.place.one_way.max())
        self.horizon_ms = 2.0 * max_ow + 3.0 * self.period_ms + 1.0
        self.holders = HolderHistory(region, self.horizon_ms)
        self.all_mask = bits_of(list(range(self.n_workers)))
        self._depth = np.zeros(self.n_workers, dtype=np.int64)
        self.n_regions = n_regions
        # Queue reports per region, in arrival order at the directory.
        self._reports: list[list[LoadReading]] = [[] for _ in range(n_regions)]
        self._arrived: list[list[float]] = [[] for _ in range(n_regions)]
        self.n_lookups = 0

    # -- channels ---------------------------------------------------------------------------

    def start(self) -> None:
        for r in range(self.n_regions):
            self.ctx.loads.subscribe(r, self._report)

    def _report(self, reading: LoadReading) -> None:
        # The region's poll, forwarded to the directory: usable once it has crossed the WAN.
        r = reading.region
        at = reading.at_ms + self.ctx.network.sample_ms(r, self.place.region)
        arrived = self._arrived[r]
        reps = self._reports[r]
        # Jitter can reorder two reports; keep arrival order (bisect below needs it).
        k = bisect_right(arrived, at)
        arrived.insert(k, at)
        reps.insert(k, reading)
        if len(reps) > 64:  # older reports can never be the newest arrived one again
            del arrived[:32], reps[:32]

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    # -- the directory's view at decision time ------------------------------------------------

    def _newest(self, r: int, t_d: float) -> LoadReading | None:
        """Region ``r``'s newest report that has reached the directory by ``t_d``."""
        k = bisect_right(self._arrived[r], t_d) - 1
        return self._reports[r][k] if k >= 0 else None

    def _matched(self, req: int, t_d: float) -> NDArray[np.int64]:
        depth = self._depth
        depth.fill(0)
        cutoff = t_d - self.to_dir
        self.holders.match(self.ctx.requests.nodes_of(req), self.all_mask, cutoff, depth)
        return np.minimum(depth * self.chunk, int(self.ctx.requests.prompt_len[req]))

    @abstractmethod
    def _queues(self, t_d: float) -> NDArray[np.float64]:
        """Per worker: the queue the directory believes at ``t_d``."""

    @abstractmethod
    def _booked(self, req: int, worker: int, arrive_ms: float, work_ms: float) -> None:
        """The directory sent ``req`` to ``worker``: it lands at ``arrive_ms`` with ``work_ms``."""

    # -- decision ---------------------------------------------------------------------------

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        prompt = int(rq.prompt_len[req])
        t_d = now_ms + float(self.to_dir[origin])
        matched = self._matched(req, t_d)
        tq = self._queues(t_d)
        # Events carry no tier the directory keeps: a held prefix is scored as VRAM.
        tiers = (matched > 0).astype(np.uint8)
        w, lam = self.place.choose(origin, prompt, matched, tiers, tq)
        lookup = self.place.lookup[origin]
        arrive = now_ms + lookup + float(self.place.forward_ms[origin][w])
        self._booked(req, w, arrive, self.place.work_ms(w, prompt, int(matched[w])))
        self.n_lookups += 1
        return Route(
            worker=w,
            lookup_ms=lookup,
            claimed_tokens=int(matched[w]),
            extra={"lambda": lam, "queue_ms": float(tq[w])},
        )

    def finish(self) -> dict[str, float]:
        return {"directory_region": float(self.place.region), "lookups": float(self.n_lookups)}


class CentralDirectory(_Directory):
    """One directory in the best-connected region with its own dispatch ledger (issue 34): every
    forward booked (``RegionBooking``) until the serving side tells it of the first token."""

    name = "central_directory"
    wants_responses: ClassVar[bool] = True  # the engine reports first tokens only then
    wants_served: ClassVar[bool] = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        # hop 0: forwards are booked at their landing time, retired at their prefill's end.
        self.booking = RegionBooking(np.arange(self.n_workers, dtype=np.int64), 0.0)
        self._hop = float(ctx.deployment.in_region_one_way_ms)
        self._told: list[tuple[float, int, float]] = []
        """(when the directory learns it, request, prefill end): first tokens on their way."""
        self._applied = [-np.inf] * self.n_regions
        self.retired = 0

    def on_served(self, resp: Response) -> None:
        """The serving region saw the first token (prefill end + one hop): it tells the
        directory, one jittered one-way WAN later."""
        at = resp.sent_ms + self._hop + self.ctx.network.sample_ms(resp.region, self.place.region)
        heapq.heappush(self._told, (at, resp.req, resp.sent_ms))

    def _queues(self, t_d: float) -> NDArray[np.float64]:
        """Per worker: the booked drain (first tokens learned by ``t_d``), raised by the newest
        report of each region that has arrived."""
        booking, told = self.booking, self._told
        while told and told[0][0] <= t_d:
            _, req, finish = heapq.heappop(told)
            if booking.retire(req, finish) >= 0:
                self.retired += 1
        for r in range(self.n_regions):
            rep = self._newest(r, t_d)
            if rep is None or rep.taken_ms <= self._applied[r]:
                continue
            self._applied[r] = rep.taken_ms
            for w, q in zip(rep.workers.tolist(), rep.queue_ms.tolist(), strict=True):
                booking.on_reading(w, q, rep.taken_ms)
        return booking.backlog(t_d)

    def _booked(self, req: int, worker: int, arrive_ms: float, work_ms: float) -> None:
        self.booking.book(req, worker, arrive_ms, work_ms)

    def finish(self) -> dict[str, float]:
        return {
            **super().finish(),
            "booked_open": float(len(self.booking)),
            "booked_retired": float(self.retired),
        }


class CentralDirectoryNoBooking(_Directory):
    """Ablation (issue 34): the directory before its dispatch ledger; a forward counts only until
    a report taken after its arrival (the core's ``ForwardLedger``)."""

    name = "central_directory_no_booking"

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        self.ledger = ForwardLedger(self.n_workers)

    def _booked(self, req: int, worker: int, arrive_ms: float, work_ms: float) -> None:
        self.ledger.add(worker, arrive_ms, work_ms)

    def _queues(self, t_d: float) -> NDArray[np.float64]:
        """Per worker: the newest arrived report, drained since, plus unreported forwards."""
        tq = np.zeros(self.n_workers, dtype=np.float64)
        taken = np.full(self.n_workers, -np.inf)
        for r in range(self.n_regions):
            k = bisect_right(self._arrived[r], t_d) - 1
            if k < 0:
                continue
            rep = self._reports[r][k]
            tq[rep.workers] = np.maximum(rep.queue_ms - (t_d - rep.taken_ms), 0.0)
            taken[rep.workers] = rep.taken_ms
        ledger = self.ledger
        if len(ledger):
            ledger.forget_landed(t_d - self.horizon_ms)
            tq += ledger.pending_after(taken)
        return tq
