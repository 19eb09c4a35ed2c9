"""SkyWalker (EuroSys'26): per-region load balancer, locality first, selective pushing (paper §5.1 baseline).

Work in progress (owned by the baselines helper): the full design notes, parameters and model
land with the implementation.
"""

from __future__ import annotations

from sim.schemes.base import Route, Scheme


class SkyWalker(Scheme):
    """Placeholder until the implementation is committed."""

    name = "skywalker"

    def route(self, req: int, now_ms: float) -> Route:
        raise NotImplementedError("skywalker: implementation in progress")
