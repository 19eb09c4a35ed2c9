"""KVCompass in the simulator: the real discovery index and the real edge router (paper §3).

Owns only the wiring: one ``Router`` per edge region (joint score, cache belief, queue view with
Δ broadcasts + piggybacked vectors, herding guard, hot-prefix migration), one maintenance-side
``DiscoveryIndex`` fed by the workers' cache events, and the edge's keyless ``IndexView`` kept
current by the patches it emits. Must not re-implement any of them: the simulator calls the very
code the edge and the pipeline run (DESIGN §2).

Propagation (sim/README "who knows what, when"). A worker's cache events travel one-way WAN
(jittered; in order per worker, as a Kafka partition keyed by worker) to the maintenance units'
region (``SimConfig.maintenance_region``, default the home region). Each ``index_batch_ms``
window's events become one batch of index ops per shard; its patches reach the view of the edge
in region o after ``index_delay_ms`` (pipeline + ``--index-delay-ms``) plus the jittered one-way
WAN from the maintenance region to o, in order per region (an ordered partition, mirrored); a
batch may be lost (``index_loss``, at the maintenance units, so for every region at once; a later
batch of the same shard is still applied, as the view's sequencer allows gaps). Every edge has
its own ``IndexView``. Local queues: the edge's periodic load poll (``ctx.loads``, the twin of
``edge/loads.py``) plus the router's herding guard. Remote queues: every Δ each region sends its
last poll reading to every region that got no piggybacked vector within Δ, over the jittered
WAN, with ``queue_loss``; cross-region responses piggyback the serving region's last reading.

Ablations (paper §5.4) are subclasses that flip ``RouterConfig`` switches; ``SimConfig.fp_bits``
and ``monotone`` switch the view's fingerprints and the monotonicity rule.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, ClassVar

import numpy as np

from kvcompass.deployment import Deployment
from kvcompass.errors import ConfigError
from kvcompass.index import DiscoveryIndex, ShardPatch
from kvcompass.index_view import IndexView
from kvcompass.layout import TableLayout
from kvcompass.router import BroadcastSchedule, InflightOverlay, Router, RouterConfig
from kvcompass.types import Tier
from sim.schemes.base import (
    CacheEventBatch,
    LoadReading,
    Migration,
    Response,
    Route,
    Scheme,
    SchemeContext,
)

# index tier code of each change kind (stored: the batch's stored_tier, filled in per batch)
_KIND_CODE = np.array([0, int(Tier.VRAM), int(Tier.DRAM), int(Tier.NONE)], dtype=np.int64)

QUEUE_ENTRY_BYTES = 2
"""Bytes per worker in a queue vector (a 16-bit ms estimate), plus an 8-byte header."""
IN_FLIGHT_ENTRY_BYTES = 6
"""Bytes per in-flight forward in a broadcast: worker (16 bits), landing offset and work (16-bit
ms each)."""


class KVCompass(Scheme):
    """Full KVCompass; subclasses below are the ablations."""

    name: ClassVar[str] = "kvcompass"
    wants_cache_events: ClassVar[bool] = True
    wants_index_keys: ClassVar[bool] = False  # keys are derived per flush, batched
    wants_responses: ClassVar[bool] = True
    router_overrides: ClassVar[dict[str, Any]] = {}

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        dep, lv, cfg = ctx.deployment, ctx.levels, ctx.config
        rc = replace(ctx.router_config or RouterConfig(), **self.router_overrides)
        self.router_config = rc
        n_regions = dep.n_regions
        self.routers = [Router.from_deployment(dep, lv, o, rc) for o in range(n_regions)]
        counts = [r.n_workers for r in dep.regions]
        layout = TableLayout.for_regions(counts)
        self.index = DiscoveryIndex(
            layout, n_shards=cfg.n_shards, fp_bits=cfg.fp_bits, seed=cfg.seed
        )
        self.maintenance_region = _region_index(dep, cfg.maintenance_region)
        # An edge starts by reading the compacted patch topic from the beginning: every table's
        # epoch header and images, before any request.
        images = self.index.full_images()
        self.views: list[IndexView] = []
        for _ in range(n_regions):
            view = IndexView(layout, lv.matrix, cfg.n_shards, monotone=cfg.monotone)
            view.apply_all(images)
            self.views.append(view)
        self.schedules = [
            BroadcastSchedule(r, n_regions, rc.broadcast_period_ms) for r in range(n_regions)
        ]
        self.overlays = [InflightOverlay(dep.n_workers) for _ in range(n_regions)]
        net, mu = ctx.network, self.maintenance_region
        self._one_way = [[net.one_way_ms(a, b) for b in range(n_regions)] for a in range(n_regions)]
        # _confirm_ms[r][o]: a registration by a worker of r reaches the view of o (static
        # matrix, a whole batch window): what the in-flight overlay waits for.
        path_ms = cfg.index_batch_ms + cfg.index_delay_ms
        self._confirm_ms = [
            [self._one_way[r][mu] + path_ms + self._one_way[mu][o] for o in range(n_regions)]
            for r in range(n_regions)
        ]
        self._workers_of = [dep.workers_of(r) for r in range(n_regions)]
        self._worker_region = dep.worker_region.tolist()
        req = ctx.requests
        self._requests = req
        self._origin = req.origin.tolist()
        self._prompt = req.prompt_len.tolist()
        keys, offsets = req.keys, req.key_offsets
        # Family key (the first key) of every request as a Python int; read only when the
        # request has keys (a prompt shorter than every indexed length has none).
        offs = np.minimum(offsets[:-1], max(keys.size - 1, 0))
        self._family = keys[offs].tolist() if keys.size else [0] * req.n
        self._pending: list[Migration] = []
        self._table_arr = np.array(
            [layout.field_of(w)[0] for w in range(dep.n_workers)], dtype=np.int64
        )
        self._field_arr = np.array(
            [layout.field_of(w)[1] for w in range(dep.n_workers)], dtype=np.int64
        )
        self._region_arr = np.asarray(dep.worker_region, dtype=np.int64)
        self._buf: list[CacheEventBatch] = []
        self._flush_due = False
        self._event_at = [0.0] * dep.n_workers  # last arrival at the MUs, per worker
        self._index_at = [0.0] * n_regions  # last patch delivery, per edge region
        self.patch_bytes = 0
        self.patch_batches = 0
        self.patches_lost = 0
        self.queue_bytes = 0
        self.migrations_asked = 0

    # -- timers ---------------------------------------------------------------------------------
    def start(self) -> None:
        for r in range(len(self.routers)):
            self.ctx.loads.subscribe(r, self._on_local_loads)
        self.ctx.schedule(self.router_config.broadcast_period_ms, self._broadcast)

    def _on_local_loads(self, reading: LoadReading) -> None:
        """The edge's own poll answered: readings replace the local estimates (edge/loads.py)."""
        r = reading.region
        self.routers[r].on_broadcast(
            r, reading.workers, reading.queue_ms, reading.at_ms, reading.taken_ms
        )

    def _broadcast(self, now: float) -> None:
        """Every Δ: each region's last poll reading to the regions due a vector, and its edge's
        forwards still in flight to every region (a peer learns them one WAN late)."""
        net, loads = self.ctx.network, self.ctx.loads
        share = self.router_config.inflight_work
        for r, sched in enumerate(self.schedules):
            reading = loads.last(r)
            due = set(sched.targets(now).tolist()) if reading is not None else set()
            flying = self.routers[r].in_flight(now) if share else []
            for o in range(len(self.schedules)):
                if o == r or (o not in due and not flying):
                    continue
                vec = reading if o in due else None
                self.queue_bytes += 8 + IN_FLIGHT_ENTRY_BYTES * len(flying)
                if vec is not None:
                    self.queue_bytes += QUEUE_ENTRY_BYTES * vec.workers.size
                net.send("queue", r, o, now, self._on_broadcast, (o, r, vec, flying))
        self.ctx.schedule(now + self.router_config.broadcast_period_ms, self._broadcast)

    def _on_peer_forward(self, at: float, payload: tuple[int, int, int, float, float]) -> None:
        p, o, w, arrive, work = payload
        self.routers[p].queue_view.on_peer_forward(o, w, arrive, work)

    def _on_broadcast(
        self,
        at: float,
        payload: tuple[int, int, LoadReading | None, list[tuple[int, float, float]]],
    ) -> None:
        o, r, reading, flying = payload
        router = self.routers[o]
        if reading is not None:
            router.on_broadcast(r, reading.workers, reading.queue_ms, at, reading.taken_ms)
        if self.router_config.inflight_work:
            router.on_peer_in_flight(r, flying)

    # -- forwarding -----------------------------------------------------------------------------
    def route(self, req: int, now_ms: float) -> Route:
        o = self._origin[req]
        router = self.routers[o]
        lengths, keys = self._requests.query_of(req, o)
        match = self.views[o].match_keys(o, lengths, keys)
        matched, tiers = match.matched_tokens, match.tiers
        overlay = self.overlays[o] if self.router_config.inflight_overlay else None
        if overlay is not None:
            matched, tiers, _ = overlay.overlay(keys, matched, tiers, now_ms)
        decision = router.choose(self._prompt[req], matched, tiers, now_ms)
        if overlay is not None and keys.size:
            w = decision.worker
            r = self._worker_region[w]
            qv = router.queue_view
            # Predicted finish at w (forward + queue estimate + service), then the index path.
            done = now_ms + self._one_way[o][r] + qv.queue_ms[w] + qv.pending_ms[w]
            done += decision.predicted_service_ms
            overlay.hold(lengths, keys, w, done + self._confirm_ms[r][o])
        w = decision.worker
        arrive = now_ms + self._one_way[o][self._worker_region[w]]
        router.on_forward(decision, now_ms, arrive)
        if self.router_config.inflight_work:
            # Announce the forward to every other edge as it is made (they count it one WAN
            # later, until a reading includes it); the Δ broadcast's list then replaces these.
            work = decision.predicted_service_ms
            net = self.ctx.network
            for p in range(len(self.routers)):
                if p != o:
                    self.queue_bytes += 8 + IN_FLIGHT_ENTRY_BYTES
                    net.send("queue", o, p, now_ms, self._on_peer_forward, (p, o, w, arrive, work))
        if self.router_config.migration and keys.size:
            family = self._family[req]
            for m in router.observe(family, match.matched_tokens, decision, now_ms):
                self.migrations_asked += 1
                source = m.source_worker if m.source_worker >= 0 else None
                if (
                    source is not None
                    and self._worker_region[source] != self._worker_region[m.target_worker]
                ):
                    source = None
                self._pending.append(Migration(m.target_worker, req, m.prefix_tokens, source))
        return Route(worker=decision.worker, claimed_tokens=decision.claimed_tokens)

    def migrations(self) -> list[Migration]:
        if not self._pending:
            return []
        out, self._pending = self._pending, []
        return out

    # -- feedback -------------------------------------------------------------------------------
    def on_migration_done(self, mig: Migration, at_ms: float) -> None:
        family = self._family[mig.req]
        self.routers[self._origin[mig.req]].complete_migration(family, at_ms)

    def on_response(self, resp: Response) -> None:
        router = self.routers[resp.origin]
        vector = None
        if resp.region != resp.origin and resp.queue_ms.size:
            vector = (resp.region, resp.region_workers, resp.queue_ms)
            self.schedules[resp.region].note_piggyback(resp.origin, resp.sent_ms)
            self.queue_bytes += QUEUE_ENTRY_BYTES * int(resp.queue_ms.size)
        router.on_response(
            resp.worker,
            resp.claimed_tokens,
            resp.reused_tokens,
            resp.arrive_ms,
            vector,
            resp.queue_taken_ms if vector is not None else None,
        )
        if self.router_config.inflight_overlay:
            # The prefill finished one WAN before its response: the index shows it one index
            # path after that.
            o, r = resp.origin, resp.region
            lengths, keys = self._requests.query_of(resp.req, o)
            if keys.size:
                done = resp.arrive_ms - self._one_way[r][o]
                self.overlays[o].hold(lengths, keys, resp.worker, done + self._confirm_ms[r][o])

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        """The worker's sidecar publishes: the events reach the maintenance units one WAN later."""
        if batch.kinds.size == 0:
            return
        w = batch.worker
        sent = self.ctx.network.sample_ms(self._worker_region[w], self.maintenance_region)
        # One partition per worker: a later batch never overtakes an earlier one.
        at = max(batch.at_ms + sent, self._event_at[w])
        self._event_at[w] = at
        self.ctx.schedule(at, functools.partial(self._at_maintenance, batch), 1)

    def _at_maintenance(self, batch: CacheEventBatch, now: float) -> None:
        self._buf.append(batch)
        if not self._flush_due:
            self._flush_due = True
            self.ctx.schedule(now + self.ctx.config.index_batch_ms, self._flush, 1)

    def _flush(self, now: float) -> None:
        """Apply one window's events as one batch of index ops per shard; ship the patches."""
        self._flush_due = False
        buf, self._buf = self._buf, []
        if not buf:
            return
        sizes = [b.kinds.size for b in buf]
        workers = np.repeat(np.array([b.worker for b in buf], dtype=np.int64), sizes)
        stored_code = np.repeat(np.array([b.stored_tier for b in buf], dtype=np.int64), sizes)
        kinds = np.concatenate([b.kinds for b in buf])
        owners = np.concatenate([b.owners for b in buf])
        depths = np.concatenate([b.depths for b in buf])
        keys, item = self._requests.keys_for_changes(owners, depths, self._region_arr[workers])
        if keys.size == 0:
            return
        w = workers[item]
        codes = np.where(kinds == 0, stored_code, _KIND_CODE[kinds])[item].astype(np.uint8)
        tables, fields = self._table_arr[w], self._field_arr[w]
        shard_of = (keys % np.uint64(self.index.n_shards)).astype(np.int64)
        # One stable sort splits the ops by shard, each shard's ops in window order.
        order = np.argsort(shard_of, kind="stable")
        ends = np.cumsum(np.bincount(shard_of, minlength=self.index.n_shards)).tolist()
        tables, keys, fields, codes = tables[order], keys[order], fields[order], codes[order]
        patches: list[ShardPatch] = []
        start = 0
        for shard, end in zip(self.index.shards, ends, strict=True):
            if end > start:
                patches += shard.apply(
                    tables[start:end], keys[start:end], fields[start:end], codes[start:end]
                )
            start = end
        if not patches:
            return
        self.patch_batches += 1
        self.patch_bytes += sum(p.batch.wire_bytes() for p in patches)
        cfg = self.ctx.config
        if cfg.index_loss > 0 and self.ctx.rng.random() < cfg.index_loss:
            self.patches_lost += 1
            return
        net, mu = self.ctx.network, self.maintenance_region
        shipment = _Shipment(patches)
        for o in range(len(self.views)):
            # Patches of a shard travel one ordered partition: never overtake an earlier batch.
            at = max(now + cfg.index_delay_ms + net.sample_ms(mu, o), self._index_at[o])
            self._index_at[o] = at
            self.ctx.schedule(at, functools.partial(self._apply, o, shipment), priority=2)

    def _apply(self, region: int, shipment: _Shipment, at_ms: float) -> None:
        # Every edge's view applies the same patches: the first validates, the others trust.
        self.views[region].apply_all(shipment.patches, checked=shipment.checked)
        shipment.checked = True

    def finish(self) -> dict[str, float]:
        return {
            "update_bytes": float(self.patch_bytes + self.queue_bytes),
            "patch_bytes": float(self.patch_bytes),
            "queue_vector_bytes": float(self.queue_bytes),
            "patch_batches": float(self.patch_batches),
            "patch_batches_lost": float(self.patches_lost),
            "migrations_asked": float(self.migrations_asked),
            "index_entries": float(self.index.entries()),
        }


class _Shipment:
    """One window's patches on their way to every edge (``checked`` once one view applied them)."""

    __slots__ = ("checked", "patches")

    def __init__(self, patches: list[ShardPatch]) -> None:
        self.patches = patches
        self.checked = False


def _region_index(dep: Deployment, name: str) -> int:
    """Index of the region called ``name``; "" is the home region (the first)."""
    if not name:
        return 0
    names = [r.name for r in dep.regions]
    if name not in names:
        raise ConfigError(f"maintenance_region: expected one of {names}, got {name!r}")
    return names.index(name)


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


class NoInflight(KVCompass):
    """Switch (beyond the paper): no in-flight overlay; only the index says who holds what."""

    name: ClassVar[str] = "kvcompass_no_inflight"
    router_overrides: ClassVar[dict[str, Any]] = {"inflight_overlay": False}


class NoInflightWork(KVCompass):
    """Switch (beyond the paper): the herding guard's pending work is zeroed at every refresh
    and edges do not share their in-flight forwards."""

    name: ClassVar[str] = "kvcompass_no_inflight_work"
    router_overrides: ClassVar[dict[str, Any]] = {"inflight_work": False}


class NoBelief(KVCompass):
    """Switch: cache belief fixed at 1 (claimed matches always trusted)."""

    name: ClassVar[str] = "kvcompass_no_belief"
    router_overrides: ClassVar[dict[str, Any]] = {"use_belief": False}
