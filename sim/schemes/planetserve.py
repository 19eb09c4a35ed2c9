"""PlanetServe (Fang et al., NSDI'26): hash radix tree plus load-balancing fallback (§5.1 #3).

What the original design does (paper and its artifact, ``eval/hrt+lb``): the scheduler keeps a
Hash Radix Tree (HRT): a trie whose edges are hashes of fixed-size token chunks and whose nodes
list the model nodes that served that prefix. A request walks the tree chunk by chunk; if it
matches deep enough (``gate`` chunks) it goes to a model node listed at the deepest match,
otherwise to a random model node (and its path is inserted). Load balancing: each model node has
a latency factor (0.875 x mean of its previous latencies in a window of 8 + 0.125 x the latest);
if the chosen node's factor is above the 80th percentile of all nodes' factors, the scheduler
walks up the tree to shallower prefixes and takes the first listed node below that cutoff, and
at the root the node with the lowest factor.

What we model:

* Tree: the HRT's chunk hashes are the workers' own cache chunks (``CacheEventBatch.stored_nodes``
  / ``removed_nodes``, prefix-unique chunk ids at the cluster's chunk size), so a node lists the
  workers that truly cached that prefix, evictions included (its best configuration: the
  artifact lists whoever was *sent* the prefix and never forgets). The tree is replicated at
  every region's scheduler; a change reaches region o one WAN one-way latency after the worker
  emitted it (``HolderHistory`` read as of ``now - one_way(r, o)``; no jitter, no loss).
* Match: every worker's matched depth in chunks; a hit needs ``GATE_TOKENS`` = 100 tokens (the
  artifact's 10 chunks x 10 tokens), rounded up to whole chunks. On a hit the deepest holder with
  the lowest latency factor is chosen; on a miss a uniformly random worker of the origin region
  (a geo-deployed scheduler would not ship an unmatched prompt across the WAN for nothing).
* Load balancing: latency factors from the TTFT the edge observes on responses (``on_response``:
  arrival at the edge minus request arrival; the artifact uses end-to-end latency, whose decode
  part depends on the output length, not on the worker's load), one window of 8 per worker
  shared by all schedulers (the overlay's gossip, assumed instant: favourable). If the chosen
  worker's factor exceeds the 80th percentile of the non-zero factors, walk up: the deepest
  shallower holder whose factor is under the cutoff; none: the worker with the lowest non-zero
  factor.

Parameters: ``GATE_TOKENS`` = 100, ``WINDOW`` = 8, ``CUTOFF_QUANTILE`` = 0.8 (artifact values).
Owns the HRT view and the latency factors; must not read ``ctx.cluster``.
"""

from __future__ import annotations

import math
from collections import deque
from typing import ClassVar

import numpy as np

from sim.schemes._holders import HolderHistory, bits_of
from sim.schemes.base import CacheEventBatch, Response, Route, Scheme, SchemeContext


class PlanetServe(Scheme):
    """Hash-radix-tree routing with the artifact's latency-factor fallback."""

    name = "planetserve"
    wants_cache_events: ClassVar[bool] = True
    wants_responses: ClassVar[bool] = True
    GATE_TOKENS: ClassVar[int] = 100
    WINDOW: ClassVar[int] = 8
    CUTOFF_QUANTILE: ClassVar[float] = 0.8

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        cluster = ctx.cluster
        self.n_workers = int(cluster.n_workers)
        self.chunk = int(cluster.chunk_tokens)
        n_regions = int(ctx.deployment.n_regions)
        self.one_way = [
            [ctx.network.one_way_ms(a, b) for b in range(n_regions)] for a in range(n_regions)
        ]
        self.gate = max(1, math.ceil(self.GATE_TOKENS / self.chunk))
        region = np.asarray(cluster.worker_region, dtype=np.int64)
        self.region_workers = [np.flatnonzero(region == r) for r in range(n_regions)]
        self.all_mask = bits_of(list(range(self.n_workers)))
        horizon = 2.0 * max(max(row) for row in self.one_way) + 1.0
        self.holders = HolderHistory(region, horizon)
        self.windows: list[deque[float]] = [
            deque(maxlen=self.WINDOW) for _ in range(self.n_workers)
        ]
        self.factor = np.zeros(self.n_workers, dtype=np.float64)
        self._depth = np.zeros(self.n_workers, dtype=np.int64)
        self.n_hits = 0
        self.n_balanced = 0

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    def on_response(self, resp: Response) -> None:
        ttft = resp.arrive_ms - float(self.ctx.requests.arrival_ms[resp.req])
        win = self.windows[resp.worker]
        win.append(ttft)
        n = len(win)
        if n == 1:
            self.factor[resp.worker] = 0.125 * ttft
        else:
            hist = (sum(win) - ttft) / (n - 1)
            self.factor[resp.worker] = 0.875 * hist + 0.125 * ttft

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        nodes = rq.nodes_of(req)
        depth = self._depth
        depth.fill(0)
        row = self.one_way
        cutoff = [now_ms - row[r][origin] for r in range(len(row))]
        best = self.holders.match(nodes, self.all_mask, cutoff, depth)
        factor = self.factor
        if best >= self.gate:
            self.n_hits += 1
            deepest = np.flatnonzero(depth == best)
            chosen = int(deepest[np.argmin(factor[deepest])])
        else:
            local = self.region_workers[origin]
            chosen = int(local[self.ctx.rng.integers(len(local))])
        nonzero = factor[factor > 0.0]
        if nonzero.size > 1:
            ranked = np.sort(nonzero)
            cut = float(ranked[int(self.CUTOFF_QUANTILE * ranked.size)])
            if factor[chosen] > cut:
                self.n_balanced += 1
                chosen = self._walk_up(chosen, cut)
        claimed = min(int(depth[chosen]) * self.chunk, int(rq.prompt_len[req]))
        return Route(worker=chosen, claimed_tokens=claimed)

    def _walk_up(self, chosen: int, cut: float) -> int:
        """Deepest shallower holder under the cutoff, else the lowest non-zero factor."""
        depth, factor = self._depth, self.factor
        under = (depth > 0) & (depth <= depth[chosen]) & (factor < cut)
        if under.any():
            cand = np.flatnonzero(under)
            top = cand[depth[cand] == depth[cand].max()]
            return int(top[np.argmin(factor[top])])
        positive = np.flatnonzero(factor > 0.0)
        return int(positive[np.argmin(factor[positive])])

    def finish(self) -> dict[str, float]:
        return {"hits": float(self.n_hits), "balanced": float(self.n_balanced)}
