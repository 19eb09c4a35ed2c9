"""The simulated worker pool: FIFO prefill queues, two-tier caches, and the events they emit.

Owns each worker's queue (``free_at``: when its FIFO drains), its cache (``sim.cluster.store``)
and the conversion of cache changes into the cache events a real worker's sidecar would publish
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

from kvcompass import costs
from kvcompass.types import Tier
from sim.cluster import kernels as k
from sim.cluster.store import CacheStore
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
        max_chunks = int(requests.prompt_len.max()) // c if requests.n else 0
        self.store = CacheStore(
            self.n_workers, cost.vram_tokens // c, cost.dram_tokens // c, policy, max_chunks
        )
        self.free_at = np.zeros(self.n_workers, dtype=np.float64)
        self._beta = cost.prefill_ms_per_token.tolist()
        self._prompt: list[int] = requests.prompt_len.tolist()
        self._gamma = cost.reload_ms_per_token
        self.emit_keys = emit_keys
        self.emit_events = emit_events

    # -- ClusterView ----------------------------------------------------------------------------
    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]:
        return np.maximum(self.free_at - now_ms, 0.0)

    def match_all(self, req: int) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        m, m_dram = self.store.match_all(self.requests.nodes_of(req))
        tokens = m * self.chunk_tokens
        tiers = np.where(m_dram > 0, Tier.DRAM, np.where(m > 0, Tier.VRAM, Tier.NONE))
        return tokens, tiers.astype(np.uint8)

    # -- work -----------------------------------------------------------------------------------
    def serve(
        self, req: int, worker: int, arrive_ms: float
    ) -> tuple[Served, CacheEventBatch | None]:
        """Run request ``req``'s prefill on ``worker`` (it arrives there at ``arrive_ms``)."""
        m, m_dram, n_changes = self.store.serve(worker, self.requests.nodes_of(req), req)
        c = self.chunk_tokens
        prompt = self._prompt[req]
        reused = min(m * c, prompt - 1) if m else 0
        dram = min(m_dram * c, reused)
        service = float(costs.prefill_ms(self._beta[worker], prompt - reused, self._gamma, dram))
        start = max(float(self.free_at[worker]), arrive_ms)
        finish = start + service
        self.free_at[worker] = finish
        batch = self._batch(worker, finish, n_changes, Tier.VRAM) if self.emit_events else None
        return Served(start, finish, reused, dram, service), batch

    def migrate(
        self, req: int, tokens: int, worker: int, at_ms: float, recompute: bool
    ) -> tuple[float, float, CacheEventBatch | None]:
        """Place request ``req``'s first ``tokens`` tokens in ``worker``'s DRAM.

        ``recompute``: the prompt is prefilled at the worker (queued, charged as GPU time);
        otherwise the KV is copied from a regional peer (``at_ms`` is when the copy lands).
        Returns (GPU ms charged, completion time, events).
        """
        chunks = self.requests.nodes_of(req)[: tokens // self.chunk_tokens]
        n = int(chunks.shape[0])
        if n == 0:
            return 0.0, at_ms, None
        held, _, n_changes = self.store.serve(worker, chunks, req, Tier.DRAM, promote=False)
        gpu = 0.0
        done = at_ms
        if recompute:
            gpu = float(
                costs.prefill_ms(self._beta[worker], (n - held) * self.chunk_tokens, 0.0, 0)
            )
            done = max(float(self.free_at[worker]), at_ms) + gpu
            self.free_at[worker] = done
        batch = self._batch(worker, done, n_changes, Tier.DRAM) if self.emit_events else None
        return gpu, done, batch

    # -- events -----------------------------------------------------------------------------------
    def _keys(
        self,
        region: int,
        sel: NDArray[np.bool_],
        owners: NDArray[np.int64],
        depths: NDArray[np.int64],
    ) -> NDArray[np.uint64]:
        if not sel.any():
            return _NO_KEYS
        return self.requests.reg_keys_many(owners[sel], depths[sel], region)

    def _batch(
        self, worker: int, at_ms: float, n: int, stored_tier: Tier
    ) -> CacheEventBatch | None:
        if n == 0:
            return None
        kind, chunk, depths, owners = self.store.o_rows[:, :n].copy()
        stored, removed = kind == k.STORED, kind == k.REMOVED
        keys = [_NO_KEYS] * 4
        if self.emit_keys:
            region = self._region[worker]
            keys = [
                self._keys(region, kind == code, owners, depths)
                for code in (k.STORED, k.DEMOTED, k.PROMOTED, k.REMOVED)
            ]
        return CacheEventBatch(
            worker=worker,
            at_ms=at_ms,
            stored=keys[0],
            stored_tier=int(stored_tier),
            to_dram=keys[1],
            to_vram=keys[2],
            removed=keys[3],
            stored_nodes=chunk[stored],
            removed_nodes=chunk[removed],
            kinds=kind,
            owners=owners,
            depths=depths,
        )
