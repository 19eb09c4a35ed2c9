"""KVCompass's cache-state path in the simulator: worker events → maintenance units → each view.

Owns the maintenance side of the discovery plane as the simulator runs it: one
``DiscoveryIndex`` fed by the workers' cache events and one keyless ``IndexView`` per edge
region kept current by the patches it emits. Must not route: ``sim.schemes.kvcompass`` reads
the views through each region's decider. The index and the views are the very code the
pipeline and the edge run (architecture §2).

Propagation (sim/README "who knows what, when"). A worker's cache events travel one-way WAN
(jittered; in order per worker, as a Kafka partition keyed by worker) to the maintenance units'
region (``SimConfig.maintenance_region``, default the home region). Each ``index_batch_ms``
window's events become one batch of index ops per shard; its patches reach the view of the edge
in region o after the pipeline's delay (drawn from the measured event -> view lag,
``sim.index_lag``, or ``index_delay_ms`` with ``index_delay_measured`` off; plus
``--index-delay-ms``) plus the jittered one-way WAN from the maintenance region to o, in order
per region (an ordered partition, mirrored); a batch may be lost (``index_loss``, at the
maintenance units, so for every region at once; a later batch of the same shard is still
applied, as the view's sequencer allows gaps).
"""

from __future__ import annotations

import functools

import numpy as np

from kvcompass.deployment import Deployment
from kvcompass.errors import ConfigError
from kvcompass.index import DiscoveryIndex, ShardPatch
from kvcompass.index_view import IndexView
from kvcompass.layout import TableLayout
from kvcompass.shards import split_by_shard
from kvcompass.types import Tier
from sim.index_lag import median_lag_ms, sample_lag_ms
from sim.schemes.base import CacheEventBatch, SchemeContext

# index tier code of each change kind (stored: the batch's stored_tier, filled in per batch)
_KIND_CODE = np.array([0, int(Tier.VRAM), int(Tier.DRAM), int(Tier.NONE)], dtype=np.int64)


class IndexPath:
    """The maintenance units and every edge's view of one run."""

    def __init__(self, ctx: SchemeContext) -> None:
        self.ctx = ctx
        dep, lv, cfg = ctx.deployment, ctx.levels, ctx.config
        n_regions = dep.n_regions
        layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
        self.index = DiscoveryIndex(
            layout, n_shards=cfg.n_shards, fp_bits=cfg.fp_bits, seed=cfg.seed
        )
        self.maintenance_region = region_index(dep, cfg.maintenance_region)
        # An edge starts by reading the compacted patch topic from the beginning: every table's
        # epoch header and images, before any request.
        images = self.index.full_images()
        self.views: list[IndexView] = []
        for _ in range(n_regions):
            view = IndexView(layout, lv.matrix, cfg.n_shards, monotone=cfg.monotone)
            view.apply_all(images)
            self.views.append(view)
        self._requests = ctx.requests
        self._worker_region = dep.worker_region.tolist()
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
        self.marks = [np.full(cfg.n_shards, -np.inf) for _ in range(n_regions)]
        """Per edge region and shard: its view reflects every event published up to then (the
        edge's ``wire.patch_applier`` marks), handed to that region's decider."""
        self.patch_bytes = 0
        self.patch_batches = 0
        self.patches_lost = 0

    def confirm_ms(self) -> list[list[float]]:
        """[r][o]: how long a registration by a worker of region r takes to reach the view of
        region o (static matrix, a whole batch window): what the pending holders wait for."""
        net, mu, cfg = self.ctx.network, self.maintenance_region, self.ctx.config
        n = len(self.views)
        path_ms = cfg.index_batch_ms + self._pipeline_ms(median=True)
        return [
            [net.one_way_ms(r, mu) + path_ms + net.one_way_ms(mu, o) for o in range(n)]
            for r in range(n)
        ]

    def _pipeline_ms(self, median: bool = False) -> float:
        """The pipeline's part of a window's way to one view: drawn from the measured lag
        (``sim.index_lag``) or the configured constant; plus ``index_extra_delay_ms``."""
        cfg = self.ctx.config
        if not cfg.index_delay_measured:
            return cfg.index_delay_ms
        lag = median_lag_ms() if median else sample_lag_ms(self.ctx.rng)
        return lag + cfg.index_extra_delay_ms

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
        # One stable sort splits the ops by shard, each shard's ops in window order.
        order, bounds = split_by_shard(keys, self.index.n_shards)
        tables, keys, fields, codes = tables[order], keys[order], fields[order], codes[order]
        patches: list[ShardPatch] = []
        start = 0
        for shard, end in zip(self.index.shards, bounds[1:].tolist(), strict=True):
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
        shipment = _Shipment(patches, min(b.at_ms for b in buf))
        for o in range(len(self.views)):
            # Patches of a shard travel one ordered partition: never overtake an earlier batch.
            at = max(now + self._pipeline_ms() + net.sample_ms(mu, o), self._index_at[o])
            self._index_at[o] = at
            self.ctx.schedule(at, functools.partial(self._apply, o, shipment), priority=2)

    def _apply(self, region: int, shipment: _Shipment, at_ms: float) -> None:
        # Every edge's view applies the same patches: the first validates, the others trust.
        self.views[region].apply_all(shipment.patches, checked=shipment.checked)
        shipment.checked = True
        marks = self.marks[region]  # as wire.patch_applier: each batch's oldest event
        for p in shipment.patches:
            marks[p.shard] = max(marks[p.shard], shipment.oldest_ms)


class _Shipment:
    """One window's patches on their way to every edge (``checked`` once one view applied them;
    ``oldest_ms``: when the window's oldest event was published, the edges' watermark)."""

    __slots__ = ("checked", "oldest_ms", "patches")

    def __init__(self, patches: list[ShardPatch], oldest_ms: float) -> None:
        self.patches = patches
        self.oldest_ms = oldest_ms
        self.checked = False


def region_index(dep: Deployment, name: str) -> int:
    """Index of the region called ``name``; "" is the home region (the first)."""
    if not name:
        return 0
    names = [r.name for r in dep.regions]
    if name not in names:
        raise ConfigError(f"maintenance_region: expected one of {names}, got {name!r}")
    return names.index(name)
