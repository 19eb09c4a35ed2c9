"""KVCompass in the simulator: native events in, ``Decider`` calls, act on its outputs (paper §3).

Owns only the wiring, one ``kvcompass.decider.Decider`` per edge region (the object the edge
runs too), fed exactly what a real edge gets when it would get it (sim/README "who knows what,
when"), and ``_index_path.IndexPath`` (the maintenance units and every edge's view). Must not
decide anything itself nor call the router, the queue view, the overlay or the ledger (a test
walks this module with ``ast``).

What each edge gets, and when:

* Its own workers' loads: the region's poll (``ctx.loads``: the SGLang ``/v1/loads`` fields
  estimated by ``kvcompass.router.load_report``), stamped with the edge's clock.
* Clocks: every edge runs its own clock, ``true time + offset[r]`` with offset[r] drawn once per
  run from N(0, ``SimConfig.edge_clock_skew_ms``) (sim/README "clock skew"); every time an edge
  passes to its decider or puts in a message is in its own clock.
* Feedback at the first token: a response reaches the serving region's edge one in-region hop
  after the prefill ends (``on_served``; it relays it on, with its vector) and the origin's edge
  one jittered WAN later (``on_response``).
* Vectors: every Δ each decider's ``broadcast``; a peer's forward announcement. Both are Kafka
  records (``edge/records.py``) and travel the sync path of a deployment (``docs/deploy.md``):
  the origin region's cluster, MirrorMaker 2, the WAN, the destination's cluster, i.e. the
  jittered one-way WAN + ``SimConfig.sync_path_ms`` (2 Kafka hops + MM2's delay, each derived
  in ``sim.config``). Relays (the request and its shortlist) and refusals (a vector) are HTTP
  and cross the WAN like the request (never lost; jittered), and so do piggybacked vectors.
  Bytes of every vector, announcement and shortlist are counted (``queue_vector_bytes``,
  ``announce_bytes``, ``shortlist_bytes``).

Ablations (paper §5.4 and beyond) are subclasses that flip ``RouterConfig`` switches;
``SimConfig.fp_bits`` and ``monotone`` switch the view's fingerprints and monotonicity rule.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from kvcompass.decider import Decider, DeciderPaths, Plan, QueueVector, Sent
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.reuse_split import REUSE_KINDS, ReuseTally, at_decision
from kvcompass.router import RouterConfig
from sim.engine.requests import MODEL_CONFIG, MODEL_ID
from sim.schemes._index_path import IndexPath
from sim.schemes.base import (
    HELD,
    CacheEventBatch,
    LoadReading,
    Migration,
    Response,
    Route,
    Scheme,
    SchemeContext,
)

ANNOUNCE_BYTES = 5 + 1 + 1 + 4 + 4
"""One forward announcement: framing, region, worker (varints), landing offset and work (floats)."""


class KVCompass(Scheme):
    """Full KVCompass (route-and-reserve on); subclasses below are the ablations."""

    name: ClassVar[str] = "kvcompass"
    wants_cache_events: ClassVar[bool] = True
    wants_index_keys: ClassVar[bool] = False  # keys are derived per flush, batched
    wants_responses: ClassVar[bool] = True
    wants_served: ClassVar[bool] = True
    router_overrides: ClassVar[dict[str, Any]] = {}

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        dep, cfg = ctx.deployment, ctx.config
        rc = replace(ctx.router_config or RouterConfig(), **self.router_overrides)
        self.router_config = rc
        n = dep.n_regions
        self.path = IndexPath(ctx)
        net = ctx.network
        one_way = np.array([[net.one_way_ms(a, b) for b in range(n)] for a in range(n)])
        confirm = np.array(self.path.confirm_ms())
        # The request table hashed every prompt with this namespace's hasher.
        hasher = PrefixHasher(KeyNamespace(model_id=MODEL_ID, model_config=MODEL_CONFIG))
        self.deciders = [
            Decider.for_deployment(
                dep,
                ctx.levels,
                o,
                rc,
                hasher,
                self.path.views[o],
                DeciderPaths(one_way, np.ascontiguousarray(confirm[:, o])),
            )
            for o in range(n)
        ]
        for o, d in enumerate(self.deciders):  # pending holders last until the view has them
            d.set_index_marks(self.path.marks[o])
        skew = float(cfg.edge_clock_skew_ms)
        drawn = ctx.rng.normal(0.0, skew, n) if skew > 0 else np.zeros(n)
        self.offset: list[float] = [float(x) for x in drawn]
        req = ctx.requests
        self._requests = req
        self._origin = req.origin.tolist()
        self._prompt = req.prompt_len.tolist()
        self._worker_region = dep.worker_region.tolist()
        self._region_arr = np.asarray(dep.worker_region, dtype=np.int64)
        self._hop = float(dep.in_region_one_way_ms)
        self._sync_ms = float(cfg.sync_path_ms)
        self._pending: list[Migration] = []
        self._family: dict[int, int] = {}
        self._piggy: dict[int, QueueVector | None] = {}
        self.queue_bytes = 0
        self.announce_bytes = 0
        self.shortlist_bytes = 0
        self.vectors_sent = 0
        self.migrations_asked = 0
        self.relays = 0
        self.refusals = 0
        self.reuse = ReuseTally()
        """The routing-visibility split, summed as the edge counts it (kvcompass.reuse_split)."""
        self._captured: dict[int, int] = {}

    def _now(self, region: int, t: float) -> float:
        """Region ``region``'s edge clock at true time ``t``."""
        return t + self.offset[region]

    # -- timers and queue state ------------------------------------------------------------------
    def start(self) -> None:
        for r in range(len(self.deciders)):
            self.ctx.loads.subscribe(r, self._on_local_loads)
        self.ctx.schedule(self.router_config.broadcast_period_ms, self._broadcast)

    def _on_local_loads(self, reading: LoadReading) -> None:
        r, off = reading.region, self.offset[reading.region]
        self.deciders[r].on_local_loads(
            reading.workers, reading.queue_ms, reading.taken_ms + off, reading.at_ms + off
        )

    def _broadcast(self, now: float) -> None:
        net = self.ctx.network
        for r, dec in enumerate(self.deciders):
            for dest, vec in dec.broadcast(self._now(r, now)):
                self._charge(vec)
                net.send("queue", r, dest, now, self._on_vector, (dest, vec), self._sync_ms)
        self.ctx.schedule(now + self.router_config.broadcast_period_ms, self._broadcast)

    def _charge(self, vec: QueueVector) -> None:
        self.queue_bytes += vec.wire_bytes()
        self.vectors_sent += 1

    def _on_vector(self, at: float, payload: tuple[int, QueueVector]) -> None:
        dest, vec = payload
        self.deciders[dest].on_vector(vec, self._now(dest, at))

    def _on_announce(self, at: float, payload: tuple[int, int, int, float, float]) -> None:
        dest, src, w, arrive, work = payload
        self.deciders[dest].on_peer_forward(src, w, arrive, work, self._now(dest, at))

    # -- forwarding -------------------------------------------------------------------------------
    def route(self, req: int, now_ms: float) -> Route:
        o = self._origin[req]
        dec = self.deciders[o]
        lengths, keys = self._requests.query_of(req, o)
        lookup = dec.lookup_keys(lengths, keys)
        if keys.size:
            self._family[req] = int(keys[0])
        plan = dec.decide(req, lookup, self._prompt[req], self._now(o, now_ms))
        return self._send(o, plan, now_ms, extra_ms=0.0)

    def _send(self, o: int, plan: Plan, now: float, extra_ms: float) -> Route:
        """Dispatch ``plan`` at the edge of ``o`` at true time ``now``; the worker's route, or
        HELD while the relay crosses the WAN."""
        sent = self.deciders[o].dispatch(plan, self._now(o, now))
        self._act(o, plan.fid, sent, now)
        if plan.fid not in self._captured:  # the origin's first plan, as its edge counts it
            claimed = plan.decision.claimed_tokens
            self._captured[plan.fid] = claimed
            m = plan.lookup.match.matched_tokens
            self.reuse.decided(at_decision(m, self._region_arr, plan.worker, claimed))
        if plan.relay_region < 0:
            return Route(
                worker=plan.worker,
                lookup_ms=extra_ms,
                claimed_tokens=plan.decision.claimed_tokens,
            )
        sl = plan.shortlist
        assert sl is not None
        self.relays += 1
        self.shortlist_bytes += sl.wire_bytes()
        self.ctx.network.send("relay", o, plan.relay_region, now, self._at_relay, plan)
        return Route(worker=HELD)

    def _act(self, o: int, req: int, sent: Sent, now: float) -> None:
        if sent.announce is not None:
            w, arrive, work = sent.announce
            net = self.ctx.network
            for p in range(len(self.deciders)):
                if p != o:
                    self.announce_bytes += ANNOUNCE_BYTES
                    net.send(
                        "queue",
                        o,
                        p,
                        now,
                        self._on_announce,
                        (p, o, w, arrive, work),
                        self._sync_ms,
                    )
        for m in sent.migrations:
            self.migrations_asked += 1
            source = m.source_worker if m.source_worker >= 0 else None
            region = self._worker_region
            if source is not None and region[source] != region[m.target_worker]:
                source = None
            self._pending.append(Migration(m.target_worker, req, m.prefix_tokens, source))

    def _at_relay(self, at: float, plan: Plan) -> None:
        """The relayed request reached the edge of its destination region."""
        sl = plan.shortlist
        assert sl is not None
        req, r = plan.fid, sl.region
        dec = self.deciders[r]
        lengths, keys = self._requests.query_of(req, r)
        verdict = dec.on_relay(req, sl, dec.lookup_keys(lengths, keys), self._now(r, at))
        if verdict.plan is not None:
            # The owning region books its pick; the response passes back through its edge.
            dec.dispatch(verdict.plan, self._now(r, at))
            d = verdict.plan.decision
            route = Route(worker=d.worker, lookup_ms=self._hop, claimed_tokens=d.claimed_tokens)
            self.ctx.dispatch(req, route, at, r)
            return
        self.refusals += 1
        vec = verdict.vector
        if vec is not None:
            self._charge(vec)
        self.ctx.network.send("relay", r, sl.origin, at, self._at_refused, (req, vec))

    def _at_refused(self, at: float, payload: tuple[int, QueueVector | None]) -> None:
        req, vec = payload
        o = self._origin[req]
        dec = self.deciders[o]
        empty = QueueVector(o, 0.0, np.zeros(0, np.int64), np.zeros(0, np.float64))
        plan = dec.on_refused(req, vec if vec is not None else empty, self._prompt[req],
                              self._now(o, at))  # fmt: skip
        route = self._send(o, plan, at, extra_ms=0.0)
        if route.worker != HELD:
            self.ctx.dispatch(req, route, at, o)

    def migrations(self) -> list[Migration]:
        if not self._pending:
            return []
        out, self._pending = self._pending, []
        return out

    # -- feedback ----------------------------------------------------------------------------------
    def on_migration_done(self, mig: Migration, at_ms: float) -> None:
        family = self._family.get(mig.req)
        if family is not None:
            o = self._origin[mig.req]
            self.deciders[o].on_migration_done(family, self._now(o, at_ms))

    def on_served(self, resp: Response) -> None:
        """The first token reached the serving region's edge (in-region hop after the prefill):
        it retires what it booked and attaches its vector to the response it relays on."""
        r = resp.region
        if r == resp.origin:
            return
        now = self._now(r, resp.sent_ms + self._hop)
        dec = self.deciders[r]
        dec.on_first_token(resp.req, resp.worker, now, resp.reused_tokens)
        self._piggy[resp.req] = dec.piggyback(resp.origin, now)

    def on_response(self, resp: Response) -> None:
        o = resp.origin
        captured = self._captured.pop(resp.req, None)
        if captured is not None:
            self.reuse.answered(captured, resp.reused_tokens)
        vec = self._piggy.pop(resp.req, None)
        if resp.queue_ms.size == 0:  # the piggyback was lost (queue_loss), or no poll yet
            vec = None
        if vec is not None:
            self.queue_bytes += vec.wire_bytes()
        self.deciders[o].on_first_token(
            resp.req, resp.worker, self._now(o, resp.arrive_ms), resp.reused_tokens, vec
        )

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.path.on_cache_events(batch)

    def finish(self) -> dict[str, float]:
        path = self.path
        return {
            "update_bytes": float(
                path.patch_bytes + self.queue_bytes + self.announce_bytes + self.shortlist_bytes
            ),
            "patch_bytes": float(path.patch_bytes),
            "queue_vector_bytes": float(self.queue_bytes),
            "announce_bytes": float(self.announce_bytes),
            "shortlist_bytes": float(self.shortlist_bytes),
            "vectors_sent": float(self.vectors_sent),
            "patch_batches": float(path.patch_batches),
            "patch_batches_lost": float(path.patches_lost),
            "migrations_asked": float(self.migrations_asked),
            "relays": float(self.relays),
            "refusals": float(self.refusals),
            "index_entries": float(path.index.entries()),
            **{f"reuse_{k}_tokens": float(self.reuse.tokens[k]) for k in REUSE_KINDS},
        }


class NoBooking(KVCompass):
    """Switch (beyond the paper): no route-and-reserve; every decision is final at the origin
    and remote workers are reached directly (the edges as the paper describes them)."""

    name: ClassVar[str] = "kvcompass_no_booking"
    router_overrides: ClassVar[dict[str, Any]] = {"booking": False}


class NoLoadAware(KVCompass):
    """Ablation: no queueing estimate (or capacity price) in the score."""

    name: ClassVar[str] = "kvcompass_no_load_aware"
    router_overrides: ClassVar[dict[str, Any]] = {"load_aware": False}


class NoXRegionReuse(KVCompass):
    """Ablation: matches outside the edge's region are ignored."""

    name: ClassVar[str] = "kvcompass_no_xregion_reuse"
    router_overrides: ClassVar[dict[str, Any]] = {"cross_region_reuse": False}


class TierBlind(KVCompass):
    """Ablation: DRAM hits priced like VRAM hits (no γ term)."""

    name: ClassVar[str] = "kvcompass_tier_blind"
    router_overrides: ClassVar[dict[str, Any]] = {"tier_aware": False}


class NoMigration(KVCompass):
    """Ablation: no proactive replica of hot prefixes."""

    name: ClassVar[str] = "kvcompass_no_migration"
    router_overrides: ClassVar[dict[str, Any]] = {"migration": False}


class NoHerdingGuard(KVCompass):
    """Switch (beyond the paper): no predicted work of the edge's own forwards between refreshes."""

    name: ClassVar[str] = "kvcompass_no_herding_guard"
    router_overrides: ClassVar[dict[str, Any]] = {"herding_guard": False}


class NoPendingHolders(KVCompass):
    """Switch (beyond the paper): no pending-holder overlay; only the index says who holds what."""

    name: ClassVar[str] = "kvcompass_no_pending_holders"
    router_overrides: ClassVar[dict[str, Any]] = {"pending_holders": False}


class NoLedger(KVCompass):
    """Switch (beyond the paper): the herding guard's pending work is zeroed at every refresh
    and edges do not share their in-flight forwards."""

    name: ClassVar[str] = "kvcompass_no_forward_ledger"
    router_overrides: ClassVar[dict[str, Any]] = {"forward_ledger": False}


class NoBelief(KVCompass):
    """Switch: cache belief fixed at 1 (claimed matches always trusted)."""

    name: ClassVar[str] = "kvcompass_no_belief"
    router_overrides: ClassVar[dict[str, Any]] = {"use_belief": False}
