"""Central directory: exact global KV state held in one region, one WAN round trip per lookup (paper §5.1 baseline).

Work in progress (owned by the baselines helper): the full design notes, parameters and model
land with the implementation.
"""

from __future__ import annotations

from sim.schemes.base import Route, Scheme


class CentralDirectory(Scheme):
    """Placeholder until the implementation is committed."""

    name = "central_directory"

    def route(self, req: int, now_ms: float) -> Route:
        raise NotImplementedError("central_directory: implementation in progress")
