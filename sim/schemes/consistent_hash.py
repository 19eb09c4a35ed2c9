"""Consistent hashing over six independent content-hash rings (paper §5.1 baseline).

Work in progress (owned by the baselines helper): the full design notes, parameters and model
land with the implementation.
"""

from __future__ import annotations

from sim.schemes.base import Route, Scheme


class ConsistentHash(Scheme):
    """Placeholder until the implementation is committed."""

    name = "consistent_hash"

    def route(self, req: int, now_ms: float) -> Route:
        raise NotImplementedError("consistent_hash: implementation in progress")
