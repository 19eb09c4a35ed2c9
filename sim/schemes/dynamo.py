"""NVIDIA Dynamo's KV-aware router in every region, global view by periodic broadcast (§5.1 #6).

What the original design does (Dynamo docs, "KV Cache Routing" / "KV Router"): workers publish
KV events (blocks stored / removed) that the router's KvIndexer keeps in a radix tree, giving the
overlap (cached blocks) of a request on every worker. The router's slot manager tracks active
blocks from its own decisions: a request's prefill blocks count until its first token, its blocks
count as decode load until the response ends. The cost of worker w is::

    logit(w) = overlap_score_weight · prefill_blocks(w) + decode_blocks(w)
    prefill_blocks(w) = active prefill blocks of w + (request blocks − overlap blocks on w)
    decode_blocks(w)  = active decode blocks of w + request blocks

and the lowest logit wins (``--router-temperature 0``: deterministic, random among equal logits;
``--kv-overlap-score-weight`` defaults to 1). Router replicas share their active-block
predictions (replica sync). The paper deploys one router per region and "periodically broadcasts
to get the global view".

What we model:

* Blocks are the cluster's cache chunks (``chunk_tokens``, the KV-event granularity).
* Router o's own region: its KvIndexer consumes the workers' KV events continuously, as
  Dynamo's router does (events stream to it over NATS / ZMQ; no snapshot period): each event
  counts one in-region hop after emission (``HolderHistory`` as of ``now - in-region
  one-way``). Its own decisions' active blocks are live.
* Global view: every ``period_ms`` (the run's ``RouterConfig.broadcast_period_ms`` when the
  runner passes one, else ``BROADCAST_MS`` = 100 ms: the paper's Δ, so Dynamo and KVCompass
  refresh equally often and a Δ sweep moves both) each router sends every other region a
  snapshot of its region's radix tree (modelled as "region r's tree as of the send time") and of
  the active blocks its own decisions put on every worker, over ``network.send`` channel
  ``"queue"`` (WAN delay, jitter, loss). Between broadcasts the remote part of the view is
  stale: that is the behaviour the paper attributes Dynamo's tail to.
* Candidates: every worker of the deployment. Dynamo's cost has no network term; to make the
  geo deployment sensible (its best configuration) the added round trip is priced in prefill
  blocks: ``weight · RTT(o, r) / (β_r · chunk)``; ``WAN_AWARE = False`` drops it.
* The response's arrival is the first token (prefill blocks released); the stream ends
  ``(output_len − 1) · decode_ms_per_token`` later (the frontend proxies the stream), releasing
  the decode blocks. The decode term of the logit is dropped (``DECODE_LOAD`` = False): in the
  simulator's cost model decode runs beside the prefills and never delays one (``sim/cost.py``),
  so decode blocks predict no TTFT and would only push requests off their best overlap. Its
  best configuration here is therefore ``overlap_score_weight · prefill_blocks`` plus the WAN
  term; the decode blocks are still tracked and broadcast (``DECODE_LOAD`` = True restores
  Dynamo's full cost).

Owns every region router's radix-tree view, active-block accounting and broadcasts; must not
read ``ctx.cluster``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from sim.schemes._holders import HolderHistory, bits_of
from sim.schemes.base import CacheEventBatch, Response, Route, Scheme, SchemeContext


class Dynamo(Scheme):
    """One Dynamo KV router per region; remote state from periodic broadcasts."""

    name = "dynamo"
    wants_cache_events: ClassVar[bool] = True
    wants_responses: ClassVar[bool] = True
    BROADCAST_MS: ClassVar[float] = 100.0
    OVERLAP_WEIGHT: ClassVar[float] = 1.0
    WAN_AWARE: ClassVar[bool] = True
    DECODE_LOAD: ClassVar[bool] = False
    """Dynamo's decode-blocks term; off because the simulator's decode never delays a prefill."""

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        cluster = ctx.cluster
        w_count = int(cluster.n_workers)
        self.n_workers = w_count
        self.chunk = int(cluster.chunk_tokens)
        region = np.asarray(cluster.worker_region, dtype=np.int64)
        self.worker_region = region
        n = int(ctx.deployment.n_regions)
        self.n_regions = n
        self.one_way = [[ctx.network.one_way_ms(a, b) for b in range(n)] for a in range(n)]
        max_ow = max(max(row) for row in self.one_way)
        rc = ctx.router_config
        self.period_ms = float(rc.broadcast_period_ms if rc is not None else self.BROADCAST_MS)
        self.holders = HolderHistory(region, 3.0 * self.period_ms + 2.0 * max_ow)
        self.all_mask = bits_of(list(range(w_count)))
        beta = np.asarray(ctx.cost.prefill_ms_per_token, dtype=np.float64)
        wan = np.asarray(ctx.deployment.wan_matrix_ms, dtype=np.float64)
        self.wan_blocks = np.zeros((n, w_count), dtype=np.float64)
        if self.WAN_AWARE:
            for o in range(n):
                self.wan_blocks[o] = (
                    self.OVERLAP_WEIGHT * 2.0 * wan[o][region] / (beta * self.chunk)
                )
        self.own_prefill = np.zeros((n, w_count), dtype=np.float64)
        self.own_decode = np.zeros((n, w_count), dtype=np.float64)
        self.snap_prefill = np.zeros((n, n, w_count), dtype=np.float64)
        self.snap_decode = np.zeros((n, n, w_count), dtype=np.float64)
        self.snap_at = np.full((n, n), -np.inf)
        # Sum over the other routers' last snapshots, kept incrementally (exact: block counts).
        self.others_prefill = np.zeros((n, w_count), dtype=np.float64)
        self.others_decode = np.zeros((n, w_count), dtype=np.float64)
        self._records: dict[int, tuple[int, int, float, float]] = {}
        self._depth = np.zeros(w_count, dtype=np.int64)
        self.n_remote = 0

    # -- channels ---------------------------------------------------------------------------

    def start(self) -> None:
        self.ctx.schedule(self.period_ms, self._broadcast)

    def _broadcast(self, now_ms: float) -> None:
        send = self.ctx.network.send
        for r in range(self.n_regions):
            pre, dec = self.own_prefill[r].copy(), self.own_decode[r].copy()
            for o in range(self.n_regions):
                if o != r:
                    send("queue", r, o, now_ms, self._on_broadcast, (r, o, now_ms, pre, dec))
        self.ctx.schedule(now_ms + self.period_ms, self._broadcast)

    def _on_broadcast(self, at_ms: float, payload: Any) -> None:
        r, o, sent, pre, dec = payload
        if sent > self.snap_at[o, r]:
            self.snap_at[o, r] = sent
            self.others_prefill[o] += pre - self.snap_prefill[o, r]
            self.others_decode[o] += dec - self.snap_decode[o, r]
            self.snap_prefill[o, r] = pre
            self.snap_decode[o, r] = dec

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.holders.apply(batch)

    def on_response(self, resp: Response) -> None:
        rec = self._records.pop(resp.req, None)
        if rec is None:
            return
        o, w, pre, dec = rec
        self.own_prefill[o, w] -= pre
        out = int(self.ctx.requests.output_len[resp.req])
        end = resp.arrive_ms + self.ctx.cost.decode_ms(out)
        self.ctx.schedule(end, _Free(self.own_decode, o, w, dec))

    # -- decision ---------------------------------------------------------------------------

    def view(self, o: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Router o's active prefill and decode blocks per worker (own live + others' snapshots)."""
        return self.others_prefill[o] + self.own_prefill[o], self.others_decode[
            o
        ] + self.own_decode[o]

    def route(self, req: int, now_ms: float) -> Route:
        rq = self.ctx.requests
        origin = int(rq.origin[req])
        prompt = int(rq.prompt_len[req])
        nodes = rq.nodes_of(req)
        depth = self._depth
        depth.fill(0)
        cutoff = [
            float(self.snap_at[origin, r]) - self.one_way[r][r] for r in range(self.n_regions)
        ]
        cutoff[origin] = now_ms - self.one_way[origin][origin]
        self.holders.match(nodes, self.all_mask, cutoff, depth)
        blocks = float(math.ceil(prompt / self.chunk))
        pre, dec = self.view(origin)
        new_prefill = blocks - depth
        logit = self.OVERLAP_WEIGHT * (pre + new_prefill) + self.wan_blocks[origin]
        if self.DECODE_LOAD:
            logit = logit + dec + blocks
        best = np.flatnonzero(logit <= logit.min() + 1e-9)
        w = int(best[0]) if best.size == 1 else int(best[self.ctx.rng.integers(best.size)])
        pb = float(new_prefill[w])
        self.own_prefill[origin, w] += pb
        self.own_decode[origin, w] += blocks
        self._records[req] = (origin, w, pb, blocks)
        if int(self.worker_region[w]) != origin:
            self.n_remote += 1
        claimed = min(int(depth[w]) * self.chunk, prompt)
        return Route(worker=w, claimed_tokens=claimed, extra={"logit": float(logit[w])})

    def finish(self) -> dict[str, float]:
        return {"remote_forwards": float(self.n_remote)}


class _Free:
    """Timer releasing one request's decode blocks when its stream ends (no closures: typed)."""

    __slots__ = ("blocks", "dec", "o", "w")

    def __init__(self, dec: NDArray[np.float64], o: int, w: int, blocks: float) -> None:
        self.dec, self.o, self.w, self.blocks = dec, o, w, blocks

    def __call__(self, _at_ms: float) -> None:
        self.dec[self.o, self.w] -= self.blocks
