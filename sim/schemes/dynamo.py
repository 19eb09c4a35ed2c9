"""NVIDIA Dynamo KV-aware router per region with periodic global broadcast (paper §5.1 baseline).

Work in progress (owned by the baselines helper): the full design notes, parameters and model
land with the implementation.
"""

from __future__ import annotations

from sim.schemes.base import Route, Scheme


class Dynamo(Scheme):
    """Placeholder until the implementation is committed."""

    name = "dynamo"

    def route(self, req: int, now_ms: float) -> Route:
        raise NotImplementedError("dynamo: implementation in progress")
