"""Routing policies an edge can run: KVCompass and the baselines the end-to-end demo compares.

Owns the choice of worker *order* (winner first, then the retry candidate) for one request, given
the KVCompass lookup and decision the edge computes anyway (microseconds), and each baseline's
own small state. Must not do I/O or know HTTP; the edge (``edge.service``) feeds back forwards and
completions. Every baseline gets the best information a real deployment of it would have, never
less (a win over a strawman is worth nothing):

``kvcompass``
    The joint score over every worker of every region (``kvcompass.router``), with migrations.
``local_cache_aware``
    A per-region cache-aware router as SGLang's gateway (sgl-router, policy ``cache_aware``, its
    default) describes it: if the region's load is imbalanced — max − min in-flight requests
    above ``balance_abs`` (64) *and* max above ``balance_rel`` (1.5) × min — go to the worker
    with the fewest in-flight requests; otherwise go to the worker with the longest prefix match
    if the match covers more than ``cache_threshold`` (0.3) of the prompt, else to the least
    loaded one (the gateway picks the replica with the smallest radix-tree record there; with our
    exact index the least loaded worker is the closer analogue of "spread new prefixes").
    Defaults are the gateway's (``--cache-threshold``, ``--balance-abs-threshold``,
    ``--balance-rel-threshold``). Its
    prefix knowledge is *better* than sgl-router's approximate tree: the edge's exact index,
    restricted to the region's workers. It never leaves the region.
``consistent_hash``
    Six content-hash rings (one per same-region level length 128, 256, …; 100 virtual nodes per
    worker, all regions on every ring), as in the simulator's baseline (``sim/schemes``): go to
    the owner of the longest level whose owner holds that prefix, else the owner of the first
    level; a prompt shorter than the first level goes to the region's least loaded worker.
    Presence comes from the edge's index (the ring nodes' announcements), read at each owner's
    own region's lengths, so it is exact up to propagation delay.
``least_loaded``
    The region's worker with the lowest queue estimate (live ``/v1/loads`` plus the work this
    edge sent since), ties to fewer in-flight requests: a cache-blind load balancer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.errors import InvalidInputError
from kvcompass.levels import Levels
from kvcompass.router import Decision

POLICIES: tuple[str, ...] = ("kvcompass", "local_cache_aware", "consistent_hash", "least_loaded")

_M64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def _mix(x: NDArray[np.uint64], seed: int) -> NDArray[np.uint64]:
    """SplitMix64 finaliser of ``x ^ seed`` (vectorised; uint64 arithmetic wraps)."""
    with np.errstate(over="ignore"):
        z = (x ^ np.uint64(seed)) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & _M64


@dataclass(frozen=True, slots=True)
class CacheAwareParams:
    """SGLang gateway's ``cache_aware`` defaults (``--cache-threshold`` etc.)."""

    cache_threshold: float = 0.3
    balance_abs: int = 64
    balance_rel: float = 1.5


class Policies:
    """The baselines' state for one edge; ``order`` applies the active policy to one request."""

    VNODES = 100
    RING_SEED = 0x6B76_636F_6D70_6173

    def __init__(
        self,
        discovery: EdgeDiscovery,
        levels: Levels,
        worker_region: NDArray[np.int64],
        beta_ms_per_token: NDArray[np.float64],
        cache_aware: CacheAwareParams | None = None,
    ) -> None:
        self.discovery = discovery
        self.origin = discovery.origin
        self.worker_region = worker_region
        self.beta = beta_ms_per_token
        self.local = np.flatnonzero(worker_region == self.origin).astype(np.int64)
        self.in_flight = np.zeros(worker_region.shape[0], np.int64)
        self.cache_aware = cache_aware or CacheAwareParams()
        self.ladder = np.asarray(levels.for_pair(self.origin, self.origin), np.int64)
        n = worker_region.shape[0]
        self.rings: list[tuple[NDArray[np.uint64], NDArray[np.int64]]] = []
        vnode_ids = np.arange(n * self.VNODES, dtype=np.uint64)
        owners = np.repeat(np.arange(n, dtype=np.int64), self.VNODES)
        for j in range(self.ladder.shape[0]):
            pos = _mix(vnode_ids, self.RING_SEED + j + 1)
            order = np.argsort(pos, kind="stable")
            self.rings.append((pos[order], owners[order]))
        self._regions = np.unique(worker_region)

    # -- feedback ---------------------------------------------------------------------------
    def begin(self, worker: int) -> None:
        self.in_flight[worker] += 1

    def end(self, worker: int) -> None:
        if self.in_flight[worker] > 0:
            self.in_flight[worker] -= 1

    # -- the choice -------------------------------------------------------------------------
    def order(
        self, policy: str, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        """(candidate workers in preference order, tokens the choice counts on at the first)."""
        if policy == "kvcompass":
            order = [decision.worker, *(int(w) for w in decision.top_workers)]
            return order, decision.claimed_tokens
        if policy == "local_cache_aware":
            return self._cache_aware(len(tokens), lookup)
        if policy == "consistent_hash":
            return self._consistent_hash(tokens)
        if policy == "least_loaded":
            return self._least_loaded(), 0
        raise InvalidInputError(f"policy: expected one of {list(POLICIES)}, got {policy!r}")

    def _queue(self) -> NDArray[np.float64]:
        qv = self.discovery.router.queue_view
        return qv.queue_ms + qv.pending_ms

    def _least_loaded(self, among: NDArray[np.int64] | None = None) -> list[int]:
        ids = self.local if among is None else among
        q = self._queue()[ids]
        order = np.lexsort((ids, self.in_flight[ids], q))
        return [int(w) for w in ids[order]]

    def _cache_aware(self, prompt: int, lookup: Lookup) -> tuple[list[int], int]:
        ids = self.local
        load = self.in_flight[ids]
        p = self.cache_aware
        lo, hi = int(load.min()), int(load.max())
        by_load = self._least_loaded()
        if hi - lo > p.balance_abs and hi > p.balance_rel * lo:
            return by_load, 0
        matched = lookup.match.matched_tokens[ids]
        best = int(np.argmax(matched))  # lowest id among equals
        m = int(matched[best])
        if prompt and m / prompt > p.cache_threshold:
            w = int(ids[best])
            return [w, *(x for x in by_load if x != w)], m
        return by_load, 0

    def _consistent_hash(self, tokens: NDArray[np.int32]) -> tuple[list[int], int]:
        n = int(np.searchsorted(self.ladder, len(tokens), side="right"))
        if n == 0:
            return self._least_loaded(), 0
        lengths = self.ladder[:n]
        keys = self.discovery.hasher.keys_at(tokens, lengths)
        owners = np.empty(n, np.int64)
        for j in range(n):
            pos, own = self.rings[j]
            i = int(np.searchsorted(pos, _mix(keys[j : j + 1], self.RING_SEED + j + 1)[0]))
            owners[j] = own[i] if i < pos.shape[0] else own[0]
        # Presence: each owner's match at its own region's lengths (the ladder is the same).
        view = self.discovery.view
        held = np.zeros(n, np.int64)
        for r in np.unique(self.worker_region[owners]).tolist():
            m = view.match_keys(int(r), lengths, keys).matched_tokens
            sel = self.worker_region[owners] == r
            held[sel] = m[owners[sel]]
        for j in range(n - 1, -1, -1):
            if held[j] >= lengths[j]:
                w = int(owners[j])
                return [w, *(int(x) for x in owners[:j][::-1] if x != w)], int(lengths[j])
        return [int(owners[0])], 0

    def predicted_ms(self, worker: int, prompt: int, claimed: int) -> float:
        """Prefill work of a baseline's forward, for the queue estimate's pending term."""
        return float(self.beta[worker]) * max(prompt - claimed, 0)
