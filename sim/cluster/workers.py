"""The simulated worker pool: FIFO prefill queues, two-tier caches, and the events they emit.

Owns each worker's queue (``free_at``: when its FIFO drains), its ``PrefixCache`` and the
conversion of cache changes into the cache events a real worker's sidecar would publish
(``CacheEventBatch``: index keys at the worker's region's registration lengths, and chunk ids).
Must not route, schedule events or know schemes: the runner calls ``serve``/``migrate`` when a
request or migration reaches a worker, and delivers the returned events.

Queue model (sim.cost): one prefill at a time, FIFO by arrival at the worker; service =
``β·(L - reused) + γ·dram_reused``. Because service is deterministic and FIFO, a request's start
and finish are known the moment it arrives, and its cache effect is applied then, in arrival
order: every earlier request in the FIFO finishes before it starts, so reusing their prefixes is
exactly what the real queue would allow. Events are stamped with the finish time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from sim.cluster.cache import DRAM, VRAM, CacheChange, PrefixCache
from sim.cost import CostModel
from sim.engine.requests import Requests
from sim.schemes.base import CacheEventBatch

_NO_KEYS = np.zeros(0, dtype=np.uint64)
_NO_NODES = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Served:
    """Outcome of one prefill at a worker."""

    start_ms: float
    finish_ms: float
    reused_tokens: int
    dram_tokens: int
    service_ms: float


class Cluster:
    """Every worker of the deployment (implements ``schemes.base.ClusterView``)."""

    def __init__(
        self,
        worker_region: NDArray[np.int64],
        cost: CostModel,
        requests: Requests,
        policy: str,
        *,
        emit_keys: bool,
        emit_events: bool,
    ) -> None:
        self.worker_region = np.asarray(worker_region, dtype=np.int64)
        self._region = self.worker_region.tolist()
        self.n_workers = int(self.worker_region.size)
        self.cost = cost
        self.requests = requests
        self.chunk_tokens = requests.chunk_tokens
        c = self.chunk_tokens
        self.caches = [
            PrefixCache(cost.vram_tokens // c, cost.dram_tokens // c, policy)
            for _ in range(self.n_workers)
        ]
        self.free_at = np.zeros(self.n_workers, dtype=np.float64)
        self._beta = cost.prefill_ms_per_token.tolist()
        self._gamma = cost.reload_ms_per_token
        self.emit_keys = emit_keys
        self.emit_events = emit_events
        self._chunk_lists: dict[int, list[int]] = {}

    # -- ClusterView ----------------------------------------------------------------------------
    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]:
        return np.maximum(self.free_at - now_ms, 0.0)

    def match_all(self, req: int) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        chunks = self.chunks_of(req)
        tokens = np.zeros(self.n_workers, dtype=np.int64)
        tiers = np.zeros(self.n_workers, dtype=np.uint8)
        for w, cache in enumerate(self.caches):
            m, m_dram = cache.match(chunks)
            if m:
                tokens[w] = m * self.chunk_tokens
                tiers[w] = DRAM if m_dram else VRAM
        return tokens, tiers

    def chunks_of(self, req: int) -> list[int]:
        got = self._chunk_lists.get(req)
        if got is None:
            got = self.requests.nodes_of(req).tolist()
            if len(self._chunk_lists) > 65536:
                self._chunk_lists.clear()
            self._chunk_lists[req] = got
        return got

    # -- work -----------------------------------------------------------------------------------
    def serve(
        self, req: int, worker: int, arrive_ms: float
    ) -> tuple[Served, CacheEventBatch | None]:
        """Run request ``req``'s prefill on ``worker`` (it arrives there at ``arrive_ms``)."""
        chunks = self.chunks_of(req)
        change = CacheChange() if self.emit_events else None
        m, m_dram = self.caches[worker].serve(chunks, req, change)
        c = self.chunk_tokens
        prompt = int(self.requests.prompt_len[req])
        reused = min(m * c, prompt - 1) if m else 0
        dram = min(m_dram * c, reused)
        service = self._beta[worker] * (prompt - reused) + self._gamma * dram
        start = max(float(self.free_at[worker]), arrive_ms)
        finish = start + service
        self.free_at[worker] = finish
        batch = self._batch(worker, finish, change, VRAM) if change is not None else None
        return Served(start, finish, reused, dram, service), batch

    def migrate(
        self, req: int, tokens: int, worker: int, at_ms: float, recompute: bool
    ) -> tuple[float, float, CacheEventBatch | None]:
        """Place request ``req``'s first ``tokens`` tokens in ``worker``'s DRAM.

        ``recompute``: the prompt is prefilled at the worker (queued, charged as GPU time);
        otherwise the KV is copied from a regional peer (``at_ms`` is when the copy lands).
        Returns (GPU ms charged, completion time, events).
        """
        n = min(tokens // self.chunk_tokens, len(self.chunks_of(req)))
        chunks = self.chunks_of(req)[:n]
        if not chunks:
            return 0.0, at_ms, None
        change = CacheChange() if self.emit_events else None
        held = self.caches[worker].place(chunks, req, DRAM, change)
        gpu = 0.0
        done = at_ms
        if recompute:
            gpu = self._beta[worker] * (n - held) * self.chunk_tokens
            done = max(float(self.free_at[worker]), at_ms) + gpu
            self.free_at[worker] = done
        batch = self._batch(worker, done, change, DRAM) if change is not None else None
        return gpu, done, batch

    # -- events -----------------------------------------------------------------------------------
    def _keys(self, region: int, items: list[tuple[int, int, int]]) -> NDArray[np.uint64]:
        if not items or not self.emit_keys:
            return _NO_KEYS
        c = self.chunk_tokens
        reg = self.requests.reg_keys
        parts = [reg(owner, region, depth * c, (depth + 1) * c) for _, depth, owner in items]
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _stored_keys(self, region: int, items: list[tuple[int, int, int]]) -> NDArray[np.uint64]:
        # Stored chunks of one operation are one contiguous run of one owner's path.
        if not items or not self.emit_keys:
            return _NO_KEYS
        c = self.chunk_tokens
        owner = items[0][2]
        return self.requests.reg_keys(owner, region, items[0][1] * c, (items[-1][1] + 1) * c)

    def _batch(
        self, worker: int, at_ms: float, ch: CacheChange, stored_tier: int
    ) -> CacheEventBatch | None:
        if ch.empty():
            return None
        region = self._region[worker]
        return CacheEventBatch(
            worker=worker,
            at_ms=at_ms,
            stored=self._stored_keys(region, ch.stored),
            stored_tier=stored_tier,
            to_dram=self._keys(region, ch.demoted),
            to_vram=self._keys(region, ch.promoted),
            removed=self._keys(region, ch.removed),
            stored_nodes=np.array([x[0] for x in ch.stored], dtype=np.int64)
            if ch.stored
            else _NO_NODES,
            removed_nodes=np.array([x[0] for x in ch.removed], dtype=np.int64)
            if ch.removed
            else _NO_NODES,
        )
