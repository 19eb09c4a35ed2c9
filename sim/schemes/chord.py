"""Chord DHT with the six-level hash layout, one DHT key per level (paper §5.1 baseline).

Work in progress (owned by the baselines helper): the full design notes, parameters and model
land with the implementation.
"""

from __future__ import annotations

from sim.schemes.base import Route, Scheme


class Chord(Scheme):
    """Placeholder until the implementation is committed."""

    name = "chord"

    def route(self, req: int, now_ms: float) -> Route:
        raise NotImplementedError("chord: implementation in progress")
