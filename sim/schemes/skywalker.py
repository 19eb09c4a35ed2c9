"""SkyWalker (Xia et al., EuroSys'26): locality-first regional load balancers (§5.1 #5).

What the original design does (paper and its SkyServe load balancer; the KVCompass paper: "a
load balancer on each region [that] forwards a request to a replica only when the replica's
pending queue is empty using 'selective pushing'"): every region runs a load balancer (LB) in
front of its replicas. Requests wait in the LB's own queue and are bound late: the LB hands a
request to a replica only when that replica has nothing pending, choosing among the available
replicas by prefix affinity (the longest cached prefix). When its own replicas are all busy, an
LB *selectively pushes* waiting requests to another region's LB that reports available replicas
(LBs probe each other periodically, every 0.1 s in the artifact; the nearest such LB first); a
pushed request is never pushed again. It never weighs reuse against load: locality first, then
occupancy (KVCompass paper §5.2-5.3).

What we model:

* Availability: a replica is available when no request dispatched to it is still waiting for
  its first token (outstanding count 0). The LB counts what it dispatched and learns completion
  from the response passing back (``on_response``; for a pushed request that is at its origin,
  one WAN one-way later than the serving LB would: small pessimism about remote availability).
* Late binding: a request that finds no available local replica (and no push target) joins its
  LB's FIFO queue (``Route.worker = HELD``); each completion frees a replica, and that replica's
  LB hands it the head of its queue at once (``ctx.dispatch``, in-region hop). The wait in the
  LB is part of the request's TTFT, as it is for SkyWalker's users.
* Prefix affinity: from the local replicas' own KV events (``HolderHistory``; the in-region hop
  is sub-millisecond, far below a prefill, so the view is read as delivered), more exact than
  the artifact's routing-history trie (its best configuration). The head of the queue goes to
  the freed replica (the only available one); a new arrival that finds several available goes to
  the one with the longest match (ties: lowest id).
* Selective pushing: every ``PROBE_MS`` = 100 ms each LB sends its available-replica count to
  every other region over ``network.send`` channel ``"queue"`` (WAN delay, jitter and loss). An
  arrival with no available local replica, or a waiting request when a probe lands, is pushed to
  the nearest region whose last probe reported availability (minus what this LB pushed there
  since); it reaches that LB one jittered one-way later, where it is dispatched to an available
  replica by longest match or waits in that LB's queue.

Owns the LBs' queues, outstanding counts, probes and prefix views; reads no exact state.
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from sim.schemes._holders import HolderHistory, bits_of
from sim.schemes.base import HELD, CacheEventBatch, Response, Route, Scheme, SchemeContext


class SkyWalker(Scheme):
    """Per-region LBs: late binding to available replicas, selective pushing otherwise."""

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
        self.holders = HolderHistory(region, 0.0)
        self.outstanding = np.zeros(self.n_workers, dtype=np.int64)
        self.queue: list[deque[tuple[int, bool]]] = [deque() for _ in r_all]
        """Per LB: (request, was pushed here) waiting for an available replica, FIFO."""
        self.reported = np.zeros((self.n_regions, self.n_regions), dtype=np.int64)
        self.reported_at = np.full((self.n_regions, self.n_regions), -np.inf)
        self.pushed_since = np.zeros((self.n_regions, self.n_regions), dtype=np.int64)
        self._depth = np.zeros(self.n_workers, dtype=np.int64)
        self.n_local = self.n_pushed = self.n_waited = 0

    # -- channels ---------------------------------------------------------------------------

    def start(self) -> None:
        self.ctx.schedule(0.0, self._probe)

    def _available(self, region: int) -> int:
        return int((self.outstanding[self.local[region]] == 0).sum())

    def _probe(self, now_ms: float) -> None:
        free = [self._available(r) for r in range(self.n_regions)]
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
            # Selective pushing of requests already waiting at o (never pushed twice).
            q = self.queue[o]
            kept: deque[tuple[int, bool]] = deque()
            while q:
                req, pushed = q.popleft()
                if pushed or not self._push(req, o, at_ms):
                    kept.append((req, pushed))
            self.queue[o] = kept

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    def on_response(self, resp: Response) -> None:
        w = resp.worker
        if self.outstanding[w] > 0:
            self.outstanding[w] -= 1
        r = int(self.worker_region[w])
        q = self.queue[r]
        if q and self.outstanding[w] == 0:
            req, _ = q.popleft()
            self.n_waited += 1
            self._send(req, w, r, resp.arrive_ms)

    # -- decision ---------------------------------------------------------------------------

    def _match(self, region: int, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        ws = self.local[region]
        depth = self._depth
        depth[ws] = 0
        self.holders.match(nodes, self.local_mask[region], None, depth)
        return depth

    def _best_available(self, region: int, req: int) -> int:
        """The region's available replica with the longest match (-1: none available)."""
        ws = self.local[region]
        free = ws[self.outstanding[ws] == 0]
        if free.size == 0:
            return -1
        depth = self._match(region, self.ctx.requests.nodes_of(req))
        return int(free[np.argmax(depth[free])])

    def _send(self, req: int, w: int, from_region: int, now_ms: float) -> None:
        """LB ``from_region`` hands ``req`` to its replica ``w`` now."""
        self.outstanding[w] += 1
        depth = self._match(int(self.worker_region[w]), self.ctx.requests.nodes_of(req))
        claimed = min(int(depth[w]) * self.chunk, int(self.ctx.requests.prompt_len[req]))
        self.ctx.dispatch(req, Route(worker=w, claimed_tokens=claimed), now_ms, from_region)

    def _push(self, req: int, origin: int, now_ms: float) -> bool:
        """Push ``req`` from LB ``origin`` to the nearest LB reporting availability."""
        for r in self.by_distance[origin]:
            if self.reported[origin, r] - self.pushed_since[origin, r] > 0:
                self.pushed_since[origin, r] += 1
                self.n_pushed += 1
                # The request itself crosses the WAN (channel "push": never lost; a timer could
                # be dropped after the last arrival, the request must not).
                self.ctx.network.send("push", origin, r, now_ms, self._on_pushed, (req, r))
                return True
        return False

    def _on_pushed(self, at_ms: float, payload: Any) -> None:
        req, region = payload
        self.arrive(req, region, at_ms, pushed=True)

    def arrive(self, req: int, region: int, now_ms: float, pushed: bool) -> None:
        """``req`` reaches LB ``region``: an available replica now, else push or wait."""
        w = self._best_available(region, req)
        if w >= 0:
            self._send(req, w, region, now_ms)
            return
        if pushed or not self._push(req, region, now_ms):
            self.queue[region].append((req, pushed))

    def route(self, req: int, now_ms: float) -> Route:
        origin = int(self.ctx.requests.origin[req])
        w = self._best_available(origin, req)
        if w >= 0:
            self.n_local += 1
            self.outstanding[w] += 1
            depth = self._depth
            claimed = min(int(depth[w]) * self.chunk, int(self.ctx.requests.prompt_len[req]))
            return Route(worker=w, claimed_tokens=claimed, extra={"pushed": 0.0})
        if not self._push(req, origin, now_ms):
            self.queue[origin].append((req, False))
        return Route(worker=HELD)

    def finish(self) -> dict[str, float]:
        return {
            "local": float(self.n_local),
            "pushed": float(self.n_pushed),
            "waited": float(self.n_waited),
        }
