"""What every edge routing scheme shares: the port, and this edge's own view of its workers.

Owns ``EdgeState`` (the lookup machinery the edge computes anyway, the region's workers, the
requests this edge has open at each worker and the queue estimate) and ``Scheme``, the port
each scheme file implements: ``order(tokens, lookup, decision) -> (candidates, claimed)``, the
workers in preference order (winner first, then retry candidates) and the tokens the choice
counts on at the first. Must not do I/O or know HTTP; the edge (``edge.service``) feeds back
forwards and completions through ``EdgeState.begin`` / ``end``.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

from kvcompass.discovery import EdgeDiscovery, Lookup
from kvcompass.levels import Levels
from kvcompass.router import Decision


class EdgeState:
    """One edge's knowledge every scheme may read: its index, its region, its own forwards."""

    def __init__(
        self,
        discovery: EdgeDiscovery,
        levels: Levels,
        worker_region: NDArray[np.int64],
        beta_ms_per_token: NDArray[np.float64],
    ) -> None:
        self.discovery = discovery
        self.levels = levels
        self.origin = discovery.origin
        self.worker_region = worker_region
        self.beta = beta_ms_per_token
        self.local = np.flatnonzero(worker_region == self.origin).astype(np.int64)
        self.open_requests = np.zeros(worker_region.shape[0], np.int64)

    def begin(self, worker: int) -> None:
        self.open_requests[worker] += 1

    def end(self, worker: int) -> None:
        if self.open_requests[worker] > 0:
            self.open_requests[worker] -= 1

    def queue_ms(self) -> NDArray[np.float64]:
        """Per worker: the last polled queue plus the work this edge sent since (``loads``)."""
        qv = self.discovery.router.queue_view
        return qv.queue_ms + qv.pending_ms

    def local_least_loaded(self, among: NDArray[np.int64] | None = None) -> list[int]:
        """``among`` (default: the region's workers) by queue estimate, then fewer open requests."""
        ids = self.local if among is None else among
        q = self.queue_ms()[ids]
        order = np.lexsort((ids, self.open_requests[ids], q))
        return [int(w) for w in ids[order]]


class Scheme(Protocol):
    """One routing scheme of the edge (one file each, registered in ``edge.schemes``)."""

    name: ClassVar[str]

    def order(
        self, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        """(candidate workers in preference order, tokens the choice counts on at the first)."""
        ...
