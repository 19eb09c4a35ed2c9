"""SkyWalker (Xia et al., EuroSys'26): locality-first regional load balancers (§5.1 #5).

What the original design does (paper and its SkyServe load balancer): every region runs a load
balancer (LB) in front of its replicas. An LB keeps requests in its own queue and dispatches each
to a local replica that is available (no pending request queued at it), choosing among the
available ones by prefix affinity (the replica with the longest cached prefix). Only when no
local replica is available does it *selectively push* the request to another region's LB that
reports an empty queue (LBs probe each other periodically, every 0.1 s in the artifact; the
nearest such LB first). A pushed request is never pushed again. The LB never weighs cache reuse
against load: it is locality first, then occupancy (paper §5.2-5.3: it "considers only queue
occupancy" and keeps requests local "as long as any local replica is free").

What we model:

* Availability: a replica is available when no request dispatched to it is still waiting for its
  first token (outstanding count 0). Each LB counts its own dispatches and pushes received, and
  learns completion from the response passing back (``on_response``; a pushed request's
  completion is seen at its origin, one WAN one-way later than the serving LB would: small
  pessimism about remote availability).
* Prefix affinity: from the local replicas' own KV events (``HolderHistory``; the in-region hop
  is sub-millisecond, far below a prefill, so the view is read as delivered), more exact than
  the artifact's routing-history trie (its best configuration).
* Decision for a request at region o: (1) a free local replica, longest local match first (ties:
  lowest id); (2) else the nearest region whose last probe reported free replicas (minus what o
  pushed there since), and there the remote LB's own choice among its free replicas by longest
  match, or, if the report was stale and none is free, its least-outstanding replica; (3) else
  stay local: the request waits in o's LB for the first replica to free up, modelled as the
  local replica with the fewest outstanding requests (ties: longest match).
* Probes: every ``PROBE_MS`` = 100 ms each region sends its free-replica count to every other
  region over ``network.send`` channel ``"queue"`` (WAN delay, jitter and loss apply).

Owns the LBs' outstanding counts, probes and prefix views; must not read ``ctx.cluster``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from sim.schemes._holders import HolderHistory, bits_of
from sim.schemes.base import CacheEventBatch, Response, Route, Scheme, SchemeContext


class SkyWalker(Scheme):
    """Per-region LBs: local prefix affinity among free replicas, selective pushing otherwise."""

    name = "skywalker"
    wants_cache_events: ClassVar[bool] = True
    wants_responses: ClassVar[bool] = True
    PROBE_MS: ClassVar[float] = 100.0

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        cluster = ctx.cluster
        self.n_workers = int(cluster.n_workers)
        self.chunk = int(cluster.chunk_tokens)
        region = np.asarray(cluster.worker_region, dtype=np.int64)
        self.worker_region = region
        self.n_regions = int(ctx.deployment.n_regions)
        r_all = range(self.n_regions)
        self.one_way = [[ctx.network.one_way_ms(a, b) for b in r_all] for a in r_all]
        self.local = [np.flatnonzero(region == r) for r in r_all]
        self.local_mask = [bits_of(ws) for ws in self.local]
        # Push targets of each region, nearest first (ties: lower region index).
        self.by_distance = [
            [r for _, r in sorted((self.one_way[o][r], r) for r in r_all if r != o)] for o in r_all
        ]
        # The in-region hop (sub-millisecond) is far below a prefill: the LB's view is read live.
        self.holders = HolderHistory(region, 0.0)
        self.outstanding = np.zeros(self.n_workers, dtype=np.int64)
        self.reported = np.zeros((self.n_regions, self.n_regions), dtype=np.int64)
        self.reported_at = np.full((self.n_regions, self.n_regions), -np.inf)
        self.pushed_since = np.zeros((self.n_regions, self.n_regions), dtype=np.int64)
        self._depth = np.zeros(self.n_workers, dtype=np.int64)
        self.n_local = self.n_pushed = self.n_waited = 0

    # -- channels ---------------------------------------------------------------------------

    def start(self) -> None:
        self.ctx.schedule(0.0, self._probe)

    def _probe(self, now_ms: float) -> None:
        free = [int((self.outstanding[ws] == 0).sum()) for ws in self.local]
        for r in range(self.n_regions):
            for o in range(self.n_regions):
                if o != r:
                    self.ctx.network.send(
                        "queue", r, o, now_ms, self._on_probe, (r, o, now_ms, free[r])
                    )
        self.ctx.schedule(now_ms + self.PROBE_MS, self._probe)

    def _on_probe(self, at_ms: float, payload: Any) -> None:
        r, o, sent, free = payload
        if sent > self.reported_at[o, r]:
            self.reported_at[o, r] = sent
            self.reported[o, r] = free
            self.pushed_since[o, r] = 0

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    def on_response(self, resp: Response) -> None:
        if self.outstanding[resp.worker] > 0:
            self.outstanding[resp.worker] -= 1

    # -- decision ---------------------------------------------------------------------------

    def _local_choice(
        self, region: int, nodes: NDArray[np.int64], now_ms: float, free_only: bool
    ) -> int:
        """Region's LB pick: longest match among free replicas, or fewest outstanding (-1: none)."""
        ws = self.local[region]
        depth = self._depth
        depth[ws] = 0
        self.holders.match(nodes, self.local_mask[region], None, depth)
        out = self.outstanding[ws]
        if free_only:
            free = ws[out == 0]
            if free.size == 0:
                return -1
            return int(free[np.argmax(depth[free])])
        least = ws[out == out.min()]
        return int(least[np.argmax(depth[least])])

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        nodes = rq.nodes_of(req)
        w = self._local_choice(origin, nodes, now_ms, free_only=True)
        kind = 0.0
        if w >= 0:
            self.n_local += 1
        else:
            for r in self.by_distance[origin]:
                if self.reported[origin, r] - self.pushed_since[origin, r] > 0:
                    self.pushed_since[origin, r] += 1
                    w = self._local_choice(r, nodes, now_ms, free_only=True)
                    if w < 0:
                        w = self._local_choice(r, nodes, now_ms, free_only=False)
                    self.n_pushed += 1
                    kind = 1.0
                    break
            if w < 0:
                w = self._local_choice(origin, nodes, now_ms, free_only=False)
                self.n_waited += 1
                kind = 2.0
        self.outstanding[w] += 1
        claimed = min(int(self._depth[w]) * self.chunk, int(rq.prompt_len[req]))
        return Route(worker=w, claimed_tokens=claimed, extra={"pushed": kind})

    def finish(self) -> dict[str, float]:
        return {
            "local": float(self.n_local),
            "pushed": float(self.n_pushed),
            "waited_local": float(self.n_waited),
        }
