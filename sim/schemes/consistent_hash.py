"""Consistent hashing over six independent content-hash rings (paper §5.1 baseline 1, §2.3).

What the original design does: consistent hashing (Karger et al. 1997; the intra-cluster
prefix-affinity placement of Mooncake and SGLang's router) maps a content hash to the worker that
owns it on a ring of virtual nodes, so the same content always lands on the same node:
*placement equals identity*. The paper's baseline keeps one independent ring per chunk-size level
(six), so a prefix of each level length has its own designated owner.

What we model (``HashPlacement``, shared with ``sim.schemes.chord``):

* Levels: the deployment's same-region level lengths (``levels.for_pair(r, r)``: 128, 256, ...,
  4096 tokens for the defaults: a fixed doubling ladder, identical for every region, because a
  hash ring knows nothing about latency). Ring j places the level-j prefix key (the request's own
  MurmurHash3 key at that length, ``requests.keys_of``) at ``mix64(key, seed_j)``.
* Ring: every worker of every region gets ``VNODES`` = 100 virtual nodes per ring (positions from
  ``mix64``), the usual count for a ±10% share per worker; the owner is the first virtual node
  clockwise of the key. Rings span all regions: a hash-placement scheme has no notion of distance.
* Placement rule (what makes reuse happen without migration): the request goes to the owner of
  its longest level whose designated owner holds that prefix (a hit); on a miss at every level it
  goes to the owner of its first level, the family head, so the next request sharing that prefix
  finds it there. A prompt shorter than the first level has no key on any ring and nothing to
  reuse, so it is served by a uniformly random worker of its own region (sending it across the
  WAN would only add a round trip; this favours the baseline on short-prompt workloads).
  Only prefixes that sit at their designated node are found (§2.3): a copy on any other worker is
  invisible, and no load is ever considered (that is the design, and why hot families
  concentrate on one worker).
* Presence: each ring node announces the chunks it holds; an edge learns them one WAN one-way
  latency after the worker's cache event (``HolderHistory`` read as of ``now - one_way(r, o)``).
  No lookup latency: the ring is known everywhere (``Route.lookup_ms`` = 0).

Parameters: ``VNODES`` = 100, ring seeds fixed (``RING_SEED``); the level lengths come from the
deployment. Must not read ``ctx.cluster`` live (only its static shape).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from kvcompass.ring import LevelRings
from sim.schemes._holders import HolderHistory
from sim.schemes.base import CacheEventBatch, Route, Scheme, SchemeContext


class HashPlacement(Scheme):
    """Six content-hash rings and the placement rule; subclasses say how presence is learned."""

    wants_cache_events: ClassVar[bool] = True
    LIVE_PRESENCE: ClassVar[bool] = False
    """True: the designated owner answers from its own live cache (a DHT get reaches it)."""

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        cluster = ctx.cluster
        self.n_workers = int(cluster.n_workers)
        self.chunk = int(cluster.chunk_tokens)
        self.worker_region = [int(r) for r in cluster.worker_region]
        region = np.asarray(cluster.worker_region, dtype=np.int64)
        self.region_workers = [
            np.flatnonzero(region == r) for r in range(int(ctx.deployment.n_regions))
        ]
        n_regions = int(ctx.deployment.n_regions)
        self.one_way = [
            [ctx.network.one_way_ms(a, b) for b in range(n_regions)] for a in range(n_regions)
        ]
        self.level_tokens = [int(x) for x in ctx.levels.for_pair(0, 0)]
        all_lengths = [int(x) for x in ctx.requests.lengths]
        # Position of each level among the indexed lengths: keys_of(i) is that list cut at the
        # prompt, so the level-j key sits at the same index for every request.
        self.level_pos = [all_lengths.index(t) for t in self.level_tokens]
        self.rings = LevelRings(self.n_workers, len(self.level_tokens))
        self.seeds = self.rings.seeds
        # _delay_to[o][r]: how late an announcement from region r reaches an edge in region o.
        self._delay_to = [
            np.array([self.one_way[r][o] for r in range(n_regions)]) for o in range(n_regions)
        ]
        max_delay = max(max(row) for row in self.one_way)
        horizon = 0.0 if self.LIVE_PRESENCE else 2.0 * max_delay + 1.0
        self.holders = HolderHistory(cluster.worker_region, horizon)
        self.n_hits = 0
        self.n_routed = 0

    def owner(self, level: int, key: int) -> int:
        """Designated worker of ``key`` on ring ``level`` (first virtual node clockwise)."""
        return self.rings.rings[level].owner(key)

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    def presence_cutoff(self, origin: int, now_ms: float) -> NDArray[np.float64] | None:
        """Per holder region, the time up to which this edge knows the owners' caches."""
        if self.LIVE_PRESENCE:
            return None
        return now_ms - self._delay_to[origin]

    def lookup_ms(self, req: int, origin: int, owners: list[tuple[int, int]]) -> float:
        """Discovery latency of the (level, key) lookups; 0 for a ring known everywhere."""
        return 0.0

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        prompt = int(rq.prompt_len[req])
        origin = int(rq.origin[req])
        self.n_routed += 1
        _, keys = rq.keys_of(req)
        n_keys = len(keys)
        owners: list[tuple[int, int]] = []
        for j, pos in enumerate(self.level_pos):
            if pos >= n_keys or self.level_tokens[j] > prompt:
                break
            key = int(keys[pos])
            owners.append((self.owner(j, key), key))
        if not owners:
            local = self.region_workers[origin]
            return Route(worker=int(local[self.ctx.rng.integers(len(local))]))
        lookup = self.lookup_ms(req, origin, owners)
        nodes = rq.nodes_of(req)
        cutoff = self.presence_cutoff(origin, now_ms)
        for j in range(len(owners) - 1, -1, -1):
            w = owners[j][0]
            idx = self.level_tokens[j] // self.chunk - 1
            if 0 <= idx < len(nodes) and self.holders.mask(int(nodes[idx]), cutoff) >> w & 1:
                self.n_hits += 1
                return Route(
                    worker=w,
                    lookup_ms=lookup,
                    claimed_tokens=self.level_tokens[j],
                    extra={"level": float(j)},
                )
        return Route(worker=owners[0][0], lookup_ms=lookup, extra={"level": -1.0})

    def finish(self) -> dict[str, float]:
        return {
            "level_hit_rate": self.n_hits / self.n_routed if self.n_routed else 0.0,
            "tracked_chunks": float(len(self.holders)),
        }


class ConsistentHash(HashPlacement):
    """Six independent consistent-hash rings; presence learned one WAN one-way late."""

    name = "consistent_hash"
