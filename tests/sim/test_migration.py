"""The engine executes a scheme's migrations: a replica lands in the destination's DRAM."""

from __future__ import annotations

from typing import ClassVar

import pytest

from kvcompass.levels import Levels
from sim import schemes
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.runner import Run
from sim.schemes.base import CacheEventBatch, Migration, Route, Scheme, SchemeContext
from tests.sim._tiny import path, two_regions, workload


class _Migrator(Scheme):
    """Sends everything to worker 0 and, on the first request, asks worker 1 for a replica."""

    name: ClassVar[str] = "test_migrator"
    wants_cache_events: ClassVar[bool] = True

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        self.pending: list[Migration] = []
        self.events: list[CacheEventBatch] = []
        self.done: list[tuple[Migration, float]] = []

    def route(self, req: int, now_ms: float) -> Route:
        if req == 0:
            self.pending.append(Migration(dest=1, req=0, tokens=1024))
        return Route(worker=0)

    def migrations(self) -> list[Migration]:
        out, self.pending = self.pending, []
        return out

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        self.events.append(batch)

    def on_migration_done(self, mig: Migration, at_ms: float) -> None:
        self.done.append((mig, at_ms))


def test_cross_region_migration__recomputes_the_prefix_into_dram(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(schemes._ENTRIES, "test_migrator", f"{__name__}:_Migrator")
    dep = two_regions(one_way_ms=50.0, beta=0.1)
    wl = workload([path(1, 100, 0, 2)], [0.0], [0])
    levels = Levels.from_deployment(dep)
    cfg = SimConfig(seed=1)
    run = Run("test_migrator", Requests(wl, levels, 64), dep, levels, cfg)
    run.run()
    scheme = run.scheme
    assert isinstance(scheme, _Migrator)
    assert len(scheme.done) == 1
    # the prompt travels 50 ms, then 1024 tokens are recomputed at 0.1 ms/token on worker 1
    assert scheme.done[0][1] == pytest.approx(50.0 + 102.4)
    replica = [b for b in scheme.events if b.worker == 1]
    assert len(replica) == 1 and replica[0].stored_tier == 2
    assert replica[0].stored_nodes.size == 1024 // 64
    held, in_dram = run.cluster.store.match(1, Requests(wl, levels, 64).nodes_of(0))
    assert (held, in_dram) == (16, 16)
