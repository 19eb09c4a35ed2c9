"""PlanetServe (NSDI'26): hash radix tree of prefixes with load-balancing fallback (paper §5.1 baseline).

Work in progress (owned by the baselines helper): the full design notes, parameters and model
land with the implementation.
"""

from __future__ import annotations

from sim.schemes.base import Route, Scheme


class PlanetServe(Scheme):
    """Placeholder until the implementation is committed."""

    name = "planetserve"

    def route(self, req: int, now_ms: float) -> Route:
        raise NotImplementedError("planetserve: implementation in progress")
