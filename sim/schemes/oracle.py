"""Oracle: every request goes to the least-loaded worker of the whole pool (paper §5.3).

The load-balance lower bound of Fig. 14: it reads every worker's exact backlog live (no
staleness, no discovery cost) and sends the request where it will wait least once it gets there
(backlog at arrival = backlog now minus the one-way trip). Ties — typically many idle workers at
low load — go to the nearest worker, so the Oracle does not pay WAN for nothing. It ignores cache
contents on purpose: it is the bound on balance, not on reuse.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sim.schemes.base import Route, Scheme, SchemeContext


class Oracle(Scheme):
    """argmin over all workers of (backlog at arrival, one-way WAN)."""

    name: ClassVar[str] = "oracle"

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        wan = ctx.cost.wan_one_way_ms
        region = ctx.cluster.worker_region
        # one_way[o, w]: edge of region o -> worker w
        self._one_way = np.ascontiguousarray(wan[:, region])
        self._origin = ctx.requests.origin

    def route(self, req: int, now_ms: float) -> Route:
        o = int(self._origin[req])
        ow = self._one_way[o]
        wait = np.maximum(self.ctx.cluster.backlog_ms(now_ms) - ow, 0.0)
        # lexicographic (wait, WAN): WAN is < 1e3 ms, so scale it below any real wait difference
        w = int(np.argmin(wait + ow * 1e-9))
        return Route(worker=w)
