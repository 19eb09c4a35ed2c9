"""Routing policies an edge can run: KVCompass and the baselines the end-to-end demo compares.

One policy per file behind this registry (the layout of ``sim.schemes``): ``kvcompass``,
``local_cache_aware``, ``consistent_hash``, ``least_loaded``; each module's docstring says what
the policy does and where its parameters come from. ``Policies`` holds one edge's shared state
(``EdgeState``: its own in-flight forwards, its queue estimate) and one instance of every policy;
``order`` applies the named one to a request. Every baseline gets the best information a real
deployment of it would have, never less (a win over a strawman is worth nothing). Must not do
I/O or know HTTP; the edge (``edge.service``) feeds back forwards and completions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from edge.policies.base import EdgeState, Policy
from edge.policies.consistent_hash import ConsistentHashPolicy
from edge.policies.kvcompass import KVCompassPolicy
from edge.policies.least_loaded import LeastLoaded
from edge.policies.local_cache_aware import CacheAwareParams, LocalCacheAware
from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.errors import InvalidInputError
from kvcompass.levels import Levels
from kvcompass.router import Decision

POLICIES: tuple[str, ...] = ("kvcompass", "local_cache_aware", "consistent_hash", "least_loaded")

__all__ = ["POLICIES", "CacheAwareParams", "EdgeState", "Policies", "Policy"]


class Policies(EdgeState):
    """This edge's shared policy state plus every registered policy, by name."""

    def __init__(
        self,
        discovery: EdgeDiscovery,
        levels: Levels,
        worker_region: NDArray[np.int64],
        beta_ms_per_token: NDArray[np.float64],
        cache_aware: CacheAwareParams | None = None,
    ) -> None:
        super().__init__(discovery, levels, worker_region, beta_ms_per_token)
        self.consistent_hash = ConsistentHashPolicy(self)
        self.by_name: dict[str, Policy] = {
            "kvcompass": KVCompassPolicy(self),
            "local_cache_aware": LocalCacheAware(self, cache_aware),
            "consistent_hash": self.consistent_hash,
            "least_loaded": LeastLoaded(self),
        }

    def order(
        self, policy: str, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        """(candidate workers in preference order, tokens the choice counts on at the first)."""
        chosen = self.by_name.get(policy)
        if chosen is None:
            raise InvalidInputError(f"policy: expected one of {list(POLICIES)}, got {policy!r}")
        return chosen.order(tokens, lookup, decision)

    def predicted_ms(self, worker: int, prompt: int, claimed: int) -> float:
        """Prefill work of a baseline's forward, for the queue estimate's pending term."""
        return float(self.beta[worker]) * max(prompt - claimed, 0)
