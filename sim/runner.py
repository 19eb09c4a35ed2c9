"""Run one scheme over one request table: the replay loop that ties engine, cluster and scheme.

Owns the per-run wiring (one ``SeedSequence`` per run, spawned per component), the arrival-order
replay, request dispatch (edge -> worker over the WAN), worker arrival, response and cache-event
delivery, migrations, and the per-request record. Must not contain scheme logic or hardware
numbers (``sim.cost``) and must not print: progress goes through a callback.

Per request: ``route`` at arrival (after every event due by then) -> arrival at the worker after
``lookup_ms`` + jittered one-way WAN -> ``Cluster.serve`` (FIFO start, reuse, cache change) ->
at prefill finish the cache events go to the scheme and the region's queue vector is captured ->
the response reaches the edge after the jittered return trip (``on_response``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment
from kvcompass.levels import Levels
from kvcompass.router import RouterConfig
from sim import schemes as registry
from sim.cluster.workers import Cluster, Served
from sim.config import SimConfig
from sim.cost import CostModel
from sim.engine.loads import EngineReports, RegionLoadPoll
from sim.engine.loop import PRIO_DELIVERY, PRIO_RESPONSE, PRIO_WORKER, EventLoop
from sim.engine.requests import Requests
from sim.metrics import Record, load_factor_matrix, summarize
from sim.network import WanNetwork
from sim.schemes.base import (
    HELD,
    CacheEventBatch,
    ClusterShape,
    ExactCache,
    ExactQueues,
    LoadPoll,
    Migration,
    Network,
    RequestTable,
    Response,
    Route,
    Scheme,
    check_information,
)

_SEED_STREAMS = ("network", "scheme", "spare")
_NO_QUEUE = np.zeros(0, dtype=np.float64)


@dataclass(slots=True)
class RunResult:
    """One scheme's run: summary numbers, the record, and the load-factor matrix."""

    scheme: str
    summary: dict[str, float]
    record: Record
    load_factor: NDArray[np.float64]
    wall_s: float
    scheme_stats: dict[str, float] = field(default_factory=dict)


class _Context:
    """The ``SchemeContext`` handed to a scheme: only the channels its information row allows."""

    def __init__(
        self,
        *,
        deployment: Deployment,
        levels: Levels,
        cost: CostModel,
        config: SimConfig,
        router_config: RouterConfig | None,
        requests: Requests,
        cluster: ClusterShape,
        network: WanNetwork,
        loads: RegionLoadPoll,
        exact_queues: ExactQueues | None,
        exact_cache: ExactCache | None,
        rng: np.random.Generator,
        loop: EventLoop,
        horizon_ms: float,
    ) -> None:
        self.deployment = deployment
        self.levels = levels
        self.cost = cost
        self.config = config
        self.router_config = router_config
        self.requests: RequestTable = requests
        self.cluster = cluster
        self.network: Network = network
        self.loads: LoadPoll = loads
        self.exact_queues = exact_queues
        self.exact_cache = exact_cache
        self.rng = rng
        self._loop = loop
        self.horizon_ms = horizon_ms
        self._dispatch: Callable[[int, Route, float, int], None] = _no_dispatch

    def schedule(self, at_ms: float, fn: Callable[[float], None], priority: int = 5) -> None:
        # Scheme timers past the last arrival can affect no decision; dropping them lets the
        # drain terminate although periodic timers reschedule themselves.
        if at_ms <= self.horizon_ms:
            self._loop.schedule(at_ms, _call_fn, fn, priority)

    def dispatch(self, req: int, route: Route, at_ms: float, from_region: int) -> None:
        self._dispatch(req, route, at_ms, from_region)


@dataclass(frozen=True, slots=True)
class _Shape:
    """The pool's static shape (``schemes.base.ClusterShape``): all a non-ideal scheme reads."""

    n_workers: int
    worker_region: NDArray[np.int64]
    chunk_tokens: int


def _call_fn(at_ms: float, fn: Callable[[float], None]) -> None:
    fn(at_ms)


def _no_dispatch(req: int, route: Route, at_ms: float, from_region: int) -> None:
    raise RuntimeError("dispatch before the run started")


class Run:
    """The state of one replay (kept on the instance: runs never share anything mutable)."""

    def __init__(
        self,
        scheme_name: str,
        requests: Requests,
        deployment: Deployment,
        levels: Levels,
        config: SimConfig,
        router_config: RouterConfig | None = None,
    ) -> None:
        self.name = scheme_name
        self.requests = requests
        self.deployment = deployment
        self.config = config
        self.cost = CostModel.build(deployment, config)
        ss = np.random.SeedSequence(config.seed)
        streams = dict(zip(_SEED_STREAMS, ss.spawn(len(_SEED_STREAMS)), strict=True))
        self.loop = EventLoop()
        self.net = WanNetwork(
            self.cost.wan_one_way_ms, config, self.loop, np.random.default_rng(streams["network"])
        )
        cls = registry.get(scheme_name)
        check_information(cls)
        self.cluster = Cluster(
            deployment.worker_region,
            self.cost,
            requests,
            config.eviction,
            emit_keys=cls.wants_index_keys,
            emit_events=cls.wants_cache_events,
        )
        horizon = float(requests.arrival_ms[-1]) if requests.n else 0.0
        self._workers_of = [deployment.workers_of(r) for r in range(deployment.n_regions)]
        self.reports = EngineReports(self.cost.prefill_ms_per_token, config.engine_chunk_tokens)
        self.loads = RegionLoadPoll(
            self.reports,
            self.cost.prefill_ms_per_token,
            self._workers_of,
            float(deployment.in_region_one_way_ms),
            config.loads_poll_period_ms,
            self.loop,
            horizon,
        )
        shape = _Shape(
            self.cluster.n_workers, self.cluster.worker_region, self.cluster.chunk_tokens
        )
        self.ctx = _Context(
            deployment=deployment,
            levels=levels,
            cost=self.cost,
            config=config,
            router_config=router_config,
            requests=requests,
            cluster=shape,
            network=self.net,
            loads=self.loads,
            exact_queues=self.cluster if cls.exact_queues else None,
            exact_cache=self.cluster if cls.exact_cache else None,
            rng=np.random.default_rng(streams["scheme"]),
            loop=self.loop,
            horizon_ms=horizon,
        )
        self.ctx._dispatch = self._dispatch
        self.scheme: Scheme = cls(self.ctx)
        self._wants_events = cls.wants_cache_events
        self._wants_responses = cls.wants_responses
        self._wants_served = cls.wants_served
        self._hop = float(deployment.in_region_one_way_ms)
        self.rec = Record.empty(requests.n)
        self._region = deployment.worker_region.tolist()
        # Per-request inputs as Python lists: the per-event paths read scalars, and a numpy
        # scalar read costs several list reads.
        self._origin = requests.origin.tolist()
        self._arrival = requests.arrival_ms.tolist()
        self._decode_ms = [self.cost.decode_ms(int(n)) for n in requests.output_len.tolist()]
        self._mig: list[tuple[int, float, float]] = []
        self.n_migrations = 0

    # -- the replay ------------------------------------------------------------------------------
    def run(self, progress: Callable[[int], None] | None = None, every: int = 2000) -> RunResult:
        t0 = time.perf_counter()
        req = self.requests
        arrival = req.arrival_ms.tolist()
        origin = req.origin.tolist()
        loop, scheme, net, region = self.loop, self.scheme, self.net, self._region
        rec = self.rec
        self.loads.start()
        scheme.start()
        for i in range(req.n):
            t = arrival[i]
            loop.run_until(t)
            route = scheme.route(i, t)
            w = route.worker
            if w != HELD:
                arrive = t + route.lookup_ms + net.sample_ms(origin[i], region[w])
                rec.worker[i] = w
                rec.claimed[i] = route.claimed_tokens
                loop.schedule(arrive, self._on_arrive, i, PRIO_WORKER)
            migs = scheme.migrations()
            if migs:
                for mig in migs:
                    self._migrate(mig, t)
            if progress is not None and (i + 1) % every == 0:
                progress(every)
        horizon = float(np.nanmax(req.arrival_ms)) if req.n else 0.0
        # Drain: requests still queued finish; periodic timers stop at the last arrival.
        loop.run_until(horizon)
        self._drain()
        if progress is not None:
            progress(req.n % every)
        wall = time.perf_counter() - t0
        return self._result(wall)

    def _dispatch(self, i: int, route: Route, at: float, from_region: int) -> None:
        """A held request leaves ``from_region`` for its worker (``SchemeContext.dispatch``)."""
        w = route.worker
        self.rec.worker[i] = w
        self.rec.claimed[i] = route.claimed_tokens
        arrive = at + route.lookup_ms + self.net.sample_ms(from_region, self._region[w])
        self.loop.schedule(arrive, self._on_arrive, i, PRIO_WORKER)

    def _drain(self) -> None:
        self.loop.run_all()

    def _on_arrive(self, at: float, i: int) -> None:
        w = int(self.rec.worker[i])
        served, batch = self.cluster.serve(i, w, at)
        uncached = int(self.requests.prompt_len[i]) - served.reused_tokens
        self.reports.admit(w, served.start_ms, served.finish_ms, uncached)
        self._record(i, w, at, served)
        if batch is not None or self._wants_responses:
            self.loop.schedule(served.finish_ms, self._on_finish, (i, w, batch), PRIO_DELIVERY)

    def _record(self, i: int, w: int, at: float, s: Served) -> None:
        rec = self.rec
        back = self.net.sample_ms(self._region[w], self._origin[i])
        arrival = self._arrival[i]
        ttft = s.finish_ms + back - arrival
        e2e = ttft + self._decode_ms[i]
        rec.arrive_worker_ms[i] = at
        rec.ttft_ms[i] = ttft
        rec.e2e_ms[i] = e2e
        rec.done_ms[i] = arrival + e2e
        rec.reused[i] = s.reused_tokens
        rec.service_ms[i] = s.service_ms
        rec.queue_ms[i] = s.start_ms - at

    def _on_finish(self, at: float, arg: tuple[int, int, CacheEventBatch | None]) -> None:
        i, w, batch = arg
        if batch is not None and self._wants_events:
            self.scheme.on_cache_events(batch)
        if not self._wants_responses:
            return
        r = self._region[w]
        o = self._origin[i]
        # The piggybacked vector is what the serving region's edge last polled (edge/handlers.py
        # adds its queue view to a relayed response), lost with probability queue_loss.
        reading = self.loads.last(r) if r != o else None
        lost = reading is None or (
            self.config.queue_loss > 0 and self.net._uniform() < self.config.queue_loss
        )
        ws = self._workers_of[r]
        queue = _NO_QUEUE if lost or reading is None else reading.queue_ms
        resp = Response(
            req=i,
            origin=o,
            worker=w,
            claimed_tokens=int(self.rec.claimed[i]),
            reused_tokens=int(self.rec.reused[i]),
            arrive_ms=self._arrival[i] + float(self.rec.ttft_ms[i]),
            sent_ms=at,
            region=r,
            region_workers=ws[:0] if lost else ws,
            queue_ms=queue,
            queue_taken_ms=-np.inf if lost or reading is None else reading.taken_ms,
        )
        self.loop.schedule(max(resp.arrive_ms, at), self._on_response, resp, PRIO_RESPONSE)
        if self._wants_served:  # the serving region's edge sees it first (in-region hop)
            self.loop.schedule(at + self._hop, self._on_served, resp, PRIO_RESPONSE)

    def _on_response(self, at: float, resp: Response) -> None:
        self.scheme.on_response(resp)

    def _on_served(self, at: float, resp: Response) -> None:
        self.scheme.on_served(resp)

    # -- migrations ------------------------------------------------------------------------------
    def _migrate(self, mig: Migration, now: float) -> None:
        self.n_migrations += 1
        dest_region = self._region[mig.dest]
        if mig.source is not None and self._region[mig.source] == dest_region:
            at = now + mig.tokens * self.cost.copy_ms_per_token
            self.loop.schedule(at, self._do_migrate, (mig, False), PRIO_WORKER)
        else:
            o = int(self.requests.origin[mig.req])
            at = now + self.net.sample_ms(o, dest_region)
            self.loop.schedule(at, self._do_migrate, (mig, True), PRIO_WORKER)

    def _do_migrate(self, at: float, arg: tuple[Migration, bool]) -> None:
        mig, recompute = arg
        gpu, done, batch = self.cluster.migrate(mig.req, mig.tokens, mig.dest, at, recompute)
        if gpu > 0:
            self._mig.append((mig.dest, at, gpu))
            self.reports.admit_recompute(mig.dest, done - gpu, done, gpu)
        self.loop.schedule(done, self._migration_done, mig, PRIO_DELIVERY)
        if batch is not None and self._wants_events:
            self.loop.schedule(done, self._deliver_batch, batch, PRIO_DELIVERY)

    def _migration_done(self, at: float, mig: Migration) -> None:
        self.scheme.on_migration_done(mig, at)

    def _deliver_batch(self, at: float, batch: CacheEventBatch) -> None:
        self.scheme.on_cache_events(batch)

    # -- results ---------------------------------------------------------------------------------
    def _served_remote(self) -> NDArray[np.bool_]:
        """Which requests a worker outside their origin region served (False if unserved)."""
        w = self.rec.worker
        served = w >= 0
        remote = np.zeros(w.size, dtype=np.bool_)
        remote[served] = self.cluster.worker_region[w[served]] != self.requests.origin[served]
        return remote

    def _result(self, wall: float) -> RunResult:
        req, cfg = self.requests, self.config
        extra = None
        if self._mig:
            m = np.array(self._mig)
            extra = (m[:, 0].astype(np.int64), m[:, 1], m[:, 2])
        summary = summarize(
            self.rec,
            req.arrival_ms,
            req.prompt_len,
            req.output_len,
            self.cluster.n_workers,
            cfg.load_bin_ms,
            extra,
            remote=self._served_remote(),
        )
        summary["wall_s"] = wall
        summary["sim_requests_per_s"] = req.n / max(wall, 1e-9)
        summary["migrations"] = float(self.n_migrations)
        stats = self.scheme.finish()
        summary.update({f"{k}": float(v) for k, v in stats.items()})
        net_sent = sum(self.net.sent.values())
        summary["control_messages"] = float(net_sent)
        lf = load_factor_matrix(
            self.rec.worker,
            self.rec.arrive_worker_ms,
            self.rec.service_ms,
            self.cluster.n_workers,
            cfg.load_bin_ms,
        )
        return RunResult(self.name, summary, self.rec, lf, wall, stats)


def run_scheme(
    scheme_name: str,
    requests: Requests,
    deployment: Deployment,
    levels: Levels,
    config: SimConfig,
    *,
    router_config: RouterConfig | None = None,
    progress: Callable[[int], None] | None = None,
) -> RunResult:
    """Replay ``requests`` under one scheme and return its result."""
    return Run(scheme_name, requests, deployment, levels, config, router_config).run(progress)
