"""Consistent hashing over six independent content-hash rings (paper §5.1 baseline 1, §2.3).

What the original design does: consistent hashing (Karger et al. 1997; the intra-cluster
prefix-affinity placement of Mooncake and SGLang's router) maps a content hash to the worker that
owns it on a ring of virtual nodes, so the same content always lands on the same node:
*placement equals identity*. The paper's baseline keeps one independent ring per chunk-size level
(six), so a prefix of each level length has its own designated owner.

What we model (``HashPlacement``, shared with ``sim.schemes.chord``):

* Levels: six rings at ``kvcompass.ring.ladder(first, 6, chunk)``: the deployment's first
  same-region level (128 tokens by default; a hash ring knows nothing about latency) on the
  cache's chunk grid, doubled: 128 ... 4096 for 16-token chunks, 512 ... 16384 for a trace's
  512-token blocks (a level shorter than a chunk can never be held, so with the deployment's
  fixed 128/256 levels two of six rings could never hit). Ring j's key is the level-j prefix's
  identity, its prefix-unique chunk id (``requests.nodes_of``), placed at
  ``splitmix64(key, seed_j)``.
* Ring: ``kvcompass.ring.LevelRings``, shared with the edge's ``consistent_hash`` policy: every
  worker of every region gets 100 virtual nodes per ring, the usual count for a ±10% share per
  worker; the owner is the first virtual node clockwise of the key. Rings span all regions: a
  hash-placement scheme has no notion of distance.
* Placement rule (``kvcompass.ring.place``; what makes reuse happen without migration): the
  request goes to the owner of its deepest level whose designated owner holds that prefix (a
  hit); on a miss at every level it goes to the owner of its deepest level, so its prefix
  materialises where its own ring designates it and the next request naming that prefix finds
  it there: every ring does its job. (Sending every miss to the first level's owner instead made
  the six rings act as one keyed on the first level and concentrated whole families on it:
  P99 TTFT 1.9× higher on Mixed at 0.8 λ0, equal on WildChat: BASELINES.md.) A prompt shorter
  than the first level has no key on any ring and nothing to reuse, so it is served in its own
  region by the worker this edge has fewest requests in flight at (its own forwards, released
  by the responses; ties random): sending it across the WAN would only add a round trip.
  Only prefixes that sit at their designated node are found (§2.3): a copy on any other worker is
  invisible, and no load is ever considered (that is the design, and why hot families
  concentrate on one worker).
* Presence: each ring node announces the chunks it holds; an edge learns them one WAN one-way
  latency after the worker's cache event (``HolderHistory`` read as of ``now - one_way(r, o)``).
  No lookup latency: the ring is known everywhere (``Route.lookup_ms`` = 0).

Parameters: ``kvcompass.ring.VNODES`` = 100 and ``RING_SEED``; the level lengths come from the
deployment and the cache's chunk. Must not read ``ctx.cluster`` live (only its static shape).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from kvcompass.ring import LevelRings, ladder, place
from sim.schemes._holders import HolderHistory
from sim.schemes.base import CacheEventBatch, Response, Route, Scheme, SchemeContext


class HashPlacement(Scheme):
    """Six content-hash rings and the placement rule; subclasses say how presence is learned."""

    wants_cache_events: ClassVar[bool] = True
    wants_responses: ClassVar[bool] = True
    LIVE_PRESENCE: ClassVar[bool] = False
    """True: the designated owner answers from its own live cache (a DHT get reaches it)."""

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        cluster = ctx.cluster
        self.n_workers = int(cluster.n_workers)
        self.chunk = int(cluster.chunk_tokens)
        self.worker_region = [int(r) for r in cluster.worker_region]
        region = np.asarray(cluster.worker_region, dtype=np.int64)
        n_regions = int(ctx.deployment.n_regions)
        self.region_workers = [np.flatnonzero(region == r) for r in range(n_regions)]
        self.one_way = [
            [ctx.network.one_way_ms(a, b) for b in range(n_regions)] for a in range(n_regions)
        ]
        same_region = [int(x) for x in ctx.levels.for_pair(0, 0)]
        self.level_tokens = ladder(same_region[0], len(same_region), self.chunk)
        self.level_depth = [t // self.chunk - 1 for t in self.level_tokens]
        self.rings = LevelRings(self.n_workers, len(self.level_tokens))
        self.seeds = self.rings.seeds
        # _delay_to[o][r]: how late an announcement from region r reaches an edge in region o.
        self._delay_to = [
            np.array([self.one_way[r][o] for r in range(n_regions)]) for o in range(n_regions)
        ]
        max_delay = max(max(row) for row in self.one_way)
        horizon = 0.0 if self.LIVE_PRESENCE else 2.0 * max_delay + 1.0
        self.holders = HolderHistory(cluster.worker_region, horizon)
        self.open_requests = np.zeros(self.n_workers, dtype=np.int64)
        self.n_hits = 0
        self.n_routed = 0

    def owner(self, level: int, key: int) -> int:
        """Designated worker of ``key`` on ring ``level`` (first virtual node clockwise)."""
        return self.rings.rings[level].owner(key)

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    def on_response(self, resp: Response) -> None:
        if self.open_requests[resp.worker] > 0:
            self.open_requests[resp.worker] -= 1

    def presence_cutoff(self, origin: int, now_ms: float) -> NDArray[np.float64] | None:
        """Per holder region, the time up to which this edge knows the owners' caches."""
        if self.LIVE_PRESENCE:
            return None
        return now_ms - self._delay_to[origin]

    def lookup_ms(self, req: int, origin: int, owners: list[tuple[int, int]]) -> float:
        """Discovery latency of the (level, key) lookups; 0 for a ring known everywhere."""
        return 0.0

    def _local(self, origin: int) -> int:
        """A prompt with no ring key: the region's worker this edge has least in flight at."""
        local = self.region_workers[origin]
        load = self.open_requests[local]
        least = local[load == load.min()]
        return int(least[self.ctx.rng.integers(least.size)])

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        self.n_routed += 1
        nodes = rq.nodes_of(req)
        # Ring j's key is the level-j prefix's identity: its prefix-unique chunk id.
        owners = [
            (self.owner(j, int(nodes[d])), int(nodes[d]))
            for j, d in enumerate(self.level_depth)
            if d < len(nodes)
        ]
        if not owners:
            w = self._local(origin)
            self.open_requests[w] += 1
            return Route(worker=w)
        lookup = self.lookup_ms(req, origin, owners)
        cutoff = self.presence_cutoff(origin, now_ms)
        held = [bool(self.holders.mask(key, cutoff) >> w & 1) for w, key in owners]
        w, level = place([o for o, _ in owners], held)
        self.open_requests[w] += 1
        if level < 0:
            return Route(worker=w, lookup_ms=lookup, extra={"level": -1.0})
        self.n_hits += 1
        return Route(
            worker=w,
            lookup_ms=lookup,
            claimed_tokens=self.level_tokens[level],
            extra={"level": float(level)},
        )

    def finish(self) -> dict[str, float]:
        return {
            "level_hit_rate": self.n_hits / self.n_routed if self.n_routed else 0.0,
            "tracked_chunks": float(len(self.holders)),
        }


class ConsistentHash(HashPlacement):
    """Six independent consistent-hash rings; presence learned one WAN one-way late."""

    name = "consistent_hash"
