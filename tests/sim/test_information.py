"""The information rules of sim/README "who knows what, when", one test per rule.

Every test runs the real engine (event loop, WAN, worker caches, load poll) on a hand-built
three-region deployment and reads what the scheme was given, or when it learned it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from kvcompass.levels import Levels
from sim import schemes as registry
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.runner import Run
from sim.schemes.base import (
    InformationError,
    LoadReading,
    Response,
    Route,
    Scheme,
    check_information,
)
from sim.schemes.kvcompass import KVCompass
from tests.sim._tiny import path, workload
from tests.sim.baseline_fakes import three_regions

WAN = 100.0  # a-b and a-c one-way; b-c is 200
HOP = 0.5  # in-region one-way of three_regions


def _run(
    scheme: str,
    config: SimConfig | None = None,
    n: int = 12,
    gap_ms: float = 150.0,
    origins: tuple[int, ...] = (1, 2, 0),
    shared: bool = True,
) -> Run:
    """``n`` requests of one prompt family (``shared``; else one each), ``gap_ms`` apart,
    origins cycling ``origins``."""
    dep = three_regions(wan=WAN, workers=(2, 2, 2))
    prompts = [path(1 if shared else 2 + i, 40, i, 4) for i in range(n)]  # 640 + 64 tokens
    arrivals = [gap_ms * i for i in range(n)]
    wl = workload(prompts, arrivals, [origins[i % len(origins)] for i in range(n)])
    levels = Levels.from_deployment(dep)
    cfg = config or SimConfig(seed=1)
    return Run(scheme, Requests(wl, levels, cfg.chunk_tokens_for(16)), dep, levels, cfg)


def _declaring(name: str, *, cache: bool = False, queues: bool = False) -> type[Scheme]:
    class Declares(Scheme):
        exact_cache: ClassVar[bool] = cache
        exact_queues: ClassVar[bool] = queues

        def route(self, req: int, now_ms: float) -> Route:
            return Route(worker=0)

    Declares.name = name
    return Declares


# -- exact live state -------------------------------------------------------------------------


def test_exact_state__refused_unless_the_name_allows_it() -> None:
    with pytest.raises(InformationError, match="_ideal"):
        check_information(_declaring("central_directory", cache=True))
    with pytest.raises(InformationError, match="oracle"):
        check_information(_declaring("dynamo", queues=True))
    with pytest.raises(InformationError, match="_ideal"):
        check_information(_declaring("oracle", cache=True))
    check_information(_declaring("oracle", queues=True))  # the load-factor floor
    check_information(_declaring("oracle_ideal", cache=True, queues=True))


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_scheme__gets_exact_state_only_as_its_name_allows(name: str) -> None:
    ctx = _run(name, n=3).ctx
    ideal = name.endswith("_ideal")
    assert (ctx.exact_cache is not None) == (ideal and registry.get(name).exact_cache)
    if not ideal:
        assert ctx.exact_cache is None
    if not (ideal or name == "oracle"):
        assert ctx.exact_queues is None


# -- the local load poll ----------------------------------------------------------------------


def test_load_poll__mirrors_the_edges_cycle() -> None:
    run = _run("kvcompass", n=4)
    readings: list[LoadReading] = []
    run.loads.subscribe(1, readings.append)
    run.run()
    period = run.config.loads_poll_period_ms
    # Leaves at 0, answers taken one hop later, back one more hop later, next one period after.
    expected = [k * (period + 2 * HOP) + 2 * HOP for k in range(len(readings))]
    assert len(readings) >= 4
    assert [r.at_ms for r in readings] == pytest.approx(expected)
    assert [r.taken_ms for r in readings] == pytest.approx([t - HOP for t in expected])
    assert run.loads.timeout_ms == max(3 * period, 1000.0)  # edge/loads.py's timeout


def test_kvcompass_local_queues__are_the_last_poll_not_live_state() -> None:
    run = _run("kvcompass")
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    seen: list[tuple[float, float]] = []
    route = scheme.route

    def spy(req: int, now_ms: float) -> Route:
        o = int(run.requests.origin[req])
        view = scheme.routers[o].queue_view
        local = view.local_workers
        last = run.loads.last(o)
        if last is None:  # before the first poll is back: nothing known, estimates at zero
            assert np.all(view.refreshed_ms[local] == -np.inf)
            return route(req, now_ms)
        np.testing.assert_array_equal(view.queue_ms[local], last.queue_ms)
        assert np.all(view.refreshed_ms[local] == last.at_ms)
        seen.append((now_ms, last.at_ms))
        return route(req, now_ms)

    scheme.route = spy  # type: ignore[method-assign]
    run.run()
    assert len(seen) == 11
    assert any(at < now for now, at in seen[1:])  # routed between polls: the reading is older


# -- remote queues ----------------------------------------------------------------------------


def test_kvcompass_remote_queues__are_poll_readings_one_wan_late() -> None:
    run = _run("kvcompass")
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    history: dict[int, list[LoadReading]] = {r: [] for r in range(3)}
    for r in range(3):
        run.loads.subscribe(r, history[r].append)
    got: list[tuple[float, int, LoadReading]] = []
    deliver = scheme._on_broadcast

    def spy(at: float, payload: tuple[int, int, LoadReading | None, Any]) -> None:
        o, _, reading, _ = payload
        if reading is not None:
            got.append((at, o, reading))
        deliver(at, payload)

    scheme._on_broadcast = spy  # type: ignore[method-assign]
    run.run()
    assert got
    for at, o, reading in got:
        wan = run.net.one_way_ms(reading.region, o)
        assert any(reading is x for x in history[reading.region])  # a poll of the sender
        assert reading.at_ms <= at - wan + 1e-9  # that crossed the WAN after it was back


def test_piggybacked_vector__is_the_serving_regions_last_poll() -> None:
    # A burst of unrelated prompts from region c (2 workers, 70 ms each) overflows to a and b.
    run = _run("kvcompass", n=60, gap_ms=5.0, origins=(2,), shared=False)
    scheme = run.scheme
    history: dict[int, list[LoadReading]] = {r: [] for r in range(3)}
    for r in range(3):
        run.loads.subscribe(r, history[r].append)
    got: list[Response] = []
    on_response = scheme.on_response

    def spy(resp: Response) -> None:
        got.append(resp)
        on_response(resp)

    scheme.on_response = spy  # type: ignore[method-assign]
    run.run()
    remote = [r for r in got if r.region != r.origin]
    assert remote
    for resp in remote:
        before = [x for x in history[resp.region] if x.at_ms <= resp.sent_ms]
        np.testing.assert_array_equal(resp.queue_ms, before[-1].queue_ms)
        assert resp.queue_taken_ms == before[-1].taken_ms
    assert all(r.queue_ms.size == 0 for r in got if r.region == r.origin)


# -- cache state: index patches ---------------------------------------------------------------


@pytest.mark.parametrize(("mu", "mu_index"), [("", 0), ("c", 2)])
def test_kvcompass_patches__reach_each_edge_after_window_pipeline_and_both_wan_legs(
    mu: str, mu_index: int
) -> None:
    cfg = SimConfig(seed=1, maintenance_region=mu)
    # The first request (from b, served in b) emits; the second only keeps the run going.
    run = _run("kvcompass", cfg, n=2, gap_ms=2000.0)
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    applied: dict[int, float] = {}
    apply = scheme._apply

    def spy(region: int, patches: Any, at_ms: float) -> None:
        applied.setdefault(region, at_ms)
        apply(region, patches, at_ms)

    scheme._apply = spy  # type: ignore[method-assign, assignment]
    res = run.run()
    w = int(res.record.worker[0])
    assert int(run.deployment.worker_region[w]) == 1
    emitted = float(res.record.arrive_worker_ms[0] + res.record.service_ms[0])
    one_way = run.cost.wan_one_way_ms  # diagonal: the in-region hop
    at_mu = emitted + one_way[1, mu_index] + cfg.index_batch_ms + cfg.index_delay_ms
    assert applied == pytest.approx({o: at_mu + one_way[mu_index, o] for o in range(3)})
