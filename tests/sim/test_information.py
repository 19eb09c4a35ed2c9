"""The information rules of sim/README "who knows what, when", one test per rule.

Every test runs the real engine (event loop, WAN, worker caches, load poll) on a hand-built
three-region deployment and reads what the scheme was given, or when it learned it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from kvcompass.levels import Levels
from kvcompass.router.load_report import queue_ms
from sim import schemes as registry
from sim.config import SimConfig
from sim.engine.loads import EngineReports
from sim.engine.requests import Requests
from sim.index_lag import MEASURED_LAG_MS
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


def test_kvcompass_local_readings__are_the_polls_estimate_in_the_edges_clock() -> None:
    run = _run("kvcompass")
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    polls: list[LoadReading] = []
    for r in range(3):
        run.loads.subscribe(r, polls.append)
    got: list[tuple[int, Any, float, float]] = []
    for o, dec in enumerate(scheme.deciders):
        real = dec.on_local_loads

        def spy(ws: Any, qs: Any, taken: float, now: float, o: int = o, real: Any = real) -> None:
            got.append((o, qs, taken, now))
            real(ws, qs, taken, now)

        dec.on_local_loads = spy  # type: ignore[method-assign]
    run.run()
    assert len(got) == len(polls) > 10
    offsets = scheme.offset
    assert len(set(offsets)) == 3 and max(abs(x) for x in offsets) > 0  # three clocks
    for (o, qs, taken, now), reading in zip(got, polls, strict=True):
        assert o == reading.region
        np.testing.assert_array_equal(qs, reading.queue_ms)
        assert taken == pytest.approx(reading.taken_ms + offsets[o])
        assert now == pytest.approx(reading.at_ms + offsets[o])


def test_load_report__is_sglangs_fields_not_the_exact_backlog() -> None:
    """What a worker answers (sglang 0.5.23 load_inquirer): waiting requests' uncached tokens, a
    chunked prefill's unfinished chunks until its last one starts; a one-chunk prefill running
    now is not counted. The estimate is ``load_report.queue_ms``: tokens x measured ms/token."""
    reports = EngineReports(np.array([0.1]), chunk_tokens=1000)
    reports.admit(0, 0.0, 100.0, 1000)  # one chunk: 100 ms
    reports.admit(0, 100.0, 350.0, 2500)  # three chunks: 250 ms
    reports.admit(0, 350.0, 400.0, 500)
    at = {t: reports.report(0, t) for t in (50.0, 120.0, 200.0, 300.0, 360.0)}
    waiting = {t: r["num_waiting_uncached_tokens"] for t, r in at.items()}
    assert waiting[50.0] == 2500 + 500  # the running one-chunk prefill is not counted
    assert waiting[120.0] == 2500 + 500  # first chunk of three running: all of it counted
    assert waiting[200.0] == 1500 + 500  # second chunk running: one chunk done
    assert waiting[300.0] == 500  # last chunk running: not counted any more
    assert waiting[360.0] == 0
    assert queue_ms(at[50.0], 0.1) == pytest.approx(300.0)  # fallback β before any prefill
    assert at[360.0]["total_prefill_busy_us"] == pytest.approx(350_000.0)
    assert queue_ms(at[120.0], 0.1) == pytest.approx(3000 * 0.1)  # β̂ = 100 ms / 1000 tokens
    # The exact backlog at 50 ms is 350 ms; the report's estimate says 300.
    assert queue_ms(at[50.0], 0.1) < 350.0


def test_kvcompass_vectors__are_the_senders_state_one_wan_late() -> None:
    run = _run("kvcompass")
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    got: list[tuple[float, int, Any]] = []
    deliver = scheme._on_vector

    def spy(at: float, payload: tuple[int, Any]) -> None:
        got.append((at, payload[0], payload[1]))
        deliver(at, payload)

    scheme._on_vector = spy  # type: ignore[method-assign]
    run.run()
    assert any(vec.worker_ids.size for _, _, vec in got)
    for at, dest, vec in got:
        wan = run.net.one_way_ms(vec.region, dest)
        # Built by the sender (its clock) at least one WAN before it arrived.
        assert vec.taken_ms - scheme.offset[vec.region] <= at - wan + 1e-9
        assert set(vec.worker_ids.tolist()) <= set(run.deployment.workers_of(vec.region).tolist())


def test_kvcompass_relay__pays_the_wan_and_the_owning_edges_hop() -> None:
    # A burst from region c (2 workers, 70 ms each) overflows to a and b through their edges.
    run = _run("kvcompass", n=60, gap_ms=5.0, origins=(2,), shared=False)
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    res = run.run()
    rec = res.record
    region = run.deployment.worker_region[rec.worker]
    relayed = np.flatnonzero(region != 2)
    assert relayed.size and scheme.relays >= relayed.size
    arrive = rec.arrive_worker_ms[relayed] - run.requests.arrival_ms[relayed]
    wan = np.array([run.net.one_way_ms(2, int(r)) for r in region[relayed]])
    assert np.all(arrive >= wan + 2 * HOP - 1e-9)  # WAN to the owning edge, hop, relay hop
    assert res.summary["shortlist_bytes"] > 0
    assert scheme.refusals == 0 or res.summary["queue_vector_bytes"] > 0


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


def test_kvcompass_refusal__pays_a_wan_round_trip_before_the_final_send() -> None:
    # Bursts from b and c at once: each relays to the other regions, some owners refuse.
    run = _run("kvcompass", n=90, gap_ms=3.0, origins=(2, 1), shared=False)
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    refused: dict[int, tuple[int, int]] = {}
    real = scheme._at_refused

    def spy(at: float, payload: tuple[int, Any]) -> None:
        req, vec = payload
        refused[req] = (int(run.requests.origin[req]), vec.region)
        real(at, payload)

    scheme._at_refused = spy  # type: ignore[method-assign]
    res = run.run()
    assert refused and scheme.refusals == len(refused)
    for req, (o, owner) in refused.items():
        w = int(res.record.worker[req])
        final = int(run.deployment.worker_region[w])
        rtt = run.net.one_way_ms(o, owner) + run.net.one_way_ms(owner, o)
        leg = run.net.one_way_ms(o, final) if final != o else HOP
        waited = res.record.arrive_worker_ms[req] - run.requests.arrival_ms[req]
        assert waited >= rtt + leg - 1e-9  # the refusal's round trip, then the final leg


def test_kvcompass_feedback__at_the_first_token_at_each_edge_on_its_way() -> None:
    run = _run("kvcompass", n=60, gap_ms=5.0, origins=(2,), shared=False)
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    seen: dict[tuple[int, int], float] = {}
    for r, dec in enumerate(scheme.deciders):
        real = dec.on_first_token

        def spy(fid: int, w: int, now: float, *a: Any, r: int = r, real: Any = real) -> None:
            seen[(r, fid)] = now
            real(fid, w, now, *a)

        dec.on_first_token = spy  # type: ignore[method-assign]
    res = run.run()
    rec = res.record
    served_region = run.deployment.worker_region[rec.worker]
    off = scheme.offset
    for i in range(run.requests.n):
        finish = rec.arrive_worker_ms[i] + rec.queue_ms[i] + rec.service_ms[i]
        first_token = run.requests.arrival_ms[i] + rec.ttft_ms[i]
        assert seen[(2, i)] == pytest.approx(first_token + off[2])  # the origin's edge
        r = int(served_region[i])
        if r != 2:  # the owning edge saw it first, one in-region hop after the prefill
            assert seen[(r, i)] == pytest.approx(finish + HOP + off[r])


# -- cache state: index patches ---------------------------------------------------------------


@pytest.mark.parametrize(("mu", "mu_index"), [("", 0), ("c", 2)])
def test_kvcompass_patches__reach_each_edge_after_window_pipeline_and_both_wan_legs(
    mu: str, mu_index: int
) -> None:
    cfg = SimConfig(seed=1, maintenance_region=mu, index_delay_measured=False)
    # The first request (from b, served in b) emits; the second only keeps the run going.
    run = _run("kvcompass", cfg, n=2, gap_ms=2000.0)
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    applied: dict[int, float] = {}
    apply = scheme.path._apply

    def spy(region: int, patches: Any, at_ms: float) -> None:
        applied.setdefault(region, at_ms)
        apply(region, patches, at_ms)

    scheme.path._apply = spy  # type: ignore[method-assign, assignment]
    res = run.run()
    w = int(res.record.worker[0])
    assert int(run.deployment.worker_region[w]) == 1
    emitted = float(res.record.arrive_worker_ms[0] + res.record.service_ms[0])
    one_way = run.cost.wan_one_way_ms  # diagonal: the in-region hop
    at_mu = emitted + one_way[1, mu_index] + cfg.index_batch_ms + cfg.index_delay_ms
    assert applied == pytest.approx({o: at_mu + one_way[mu_index, o] for o in range(3)})


def test_kvcompass_patches__measured_pipeline_delay_drawn_per_region() -> None:
    """With the measured lag (the default), each view gets the window after the window, the
    WAN legs and a pipeline delay drawn from ``sim.index_lag`` (never below its minimum)."""
    cfg = SimConfig(seed=1)
    run = _run("kvcompass", cfg, n=2, gap_ms=2000.0)
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    applied: dict[int, float] = {}
    apply = scheme.path._apply

    def spy(region: int, patches: Any, at_ms: float) -> None:
        applied.setdefault(region, at_ms)
        apply(region, patches, at_ms)

    scheme.path._apply = spy  # type: ignore[method-assign, assignment]
    res = run.run()
    emitted = float(res.record.arrive_worker_ms[0] + res.record.service_ms[0])
    one_way = run.cost.wan_one_way_ms
    lo, hi = MEASURED_LAG_MS[0][1], MEASURED_LAG_MS[-1][1]
    for o in range(3):
        base = emitted + one_way[1, 0] + cfg.index_batch_ms + one_way[0, o]
        assert base + lo - 1e-6 <= applied[o] <= base + hi + 1e-6
    assert len({round(applied[o] - one_way[0, o], 6) for o in range(3)}) > 1  # drawn per region
