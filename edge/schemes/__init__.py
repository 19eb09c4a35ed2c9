"""Routing schemes an edge can run: KVCompass and the baselines the end-to-end demo compares.

One scheme per file behind this registry (the layout of ``sim.schemes``): ``kvcompass`` (and
``kvcompass_no_booking``, the same ordering of the other decider's plan),
``local_cache_aware``, ``consistent_hash``, ``local_least_loaded`` (region-local: the paper's
global least-loaded is the simulator's ``oracle``); each module's docstring says what the
scheme does and where its parameters come from. ``Schemes`` holds one edge's shared state
(``EdgeState``: its open requests at each worker, its queue estimate) and one instance of every
scheme; ``order`` applies the named one to a request. Every baseline gets the best information a
real deployment of it would have, never less (a win over a strawman is worth nothing). Must not do
I/O or know HTTP; the edge (``edge.service``) feeds back forwards and completions.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from edge.scheme_names import EDGE_SCHEMES
from edge.schemes.base import EdgeState, Scheme
from edge.schemes.consistent_hash import ConsistentHashScheme
from edge.schemes.kvcompass import KVCompassScheme
from edge.schemes.local_cache_aware import CacheAwareParams, LocalCacheAware
from edge.schemes.local_least_loaded import LocalLeastLoaded
from kvcompass.costs import prefill_ms
from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.errors import InvalidInputError
from kvcompass.levels import Levels
from kvcompass.router import Decision

__all__ = ["EDGE_SCHEMES", "CacheAwareParams", "EdgeState", "Scheme", "Schemes"]


class Schemes(EdgeState):
    """This edge's shared scheme state plus every registered scheme, by name."""

    def __init__(
        self,
        discovery: EdgeDiscovery,
        levels: Levels,
        worker_region: NDArray[np.int64],
        beta_ms_per_token: NDArray[np.float64],
        cache_aware: CacheAwareParams | None = None,
    ) -> None:
        super().__init__(discovery, levels, worker_region, beta_ms_per_token)
        self.consistent_hash = ConsistentHashScheme(self)
        self.by_name: dict[str, Scheme] = {
            "kvcompass": KVCompassScheme(self),
            "kvcompass_no_booking": KVCompassScheme(self),
            "local_cache_aware": LocalCacheAware(self, cache_aware),
            "consistent_hash": self.consistent_hash,
            "local_least_loaded": LocalLeastLoaded(self),
        }

    def order(
        self, scheme: str, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        """(candidate workers in preference order, tokens the choice counts on at the first)."""
        chosen = self.by_name.get(scheme)
        if chosen is None:
            raise InvalidInputError(f"scheme: expected one of {list(EDGE_SCHEMES)}, got {scheme!r}")
        return chosen.order(tokens, lookup, decision)

    def predicted_ms(self, worker: int, prompt: int, claimed: int) -> float:
        """Prefill work of a baseline's forward, for the queue estimate's pending term (the cost
        model's prefill of the unclaimed tokens; a baseline claims no DRAM reload)."""
        return float(prefill_ms(float(self.beta[worker]), max(prompt - claimed, 0), 0.0, 0))
