"""The baselines end to end through the engine, and the holder-history kernels vs their twin."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kvcompass.deployment import Deployment, builtin_deployment
from kvcompass.levels import Levels
from sim.config import SimConfig
from sim.schemes.base import CacheEventBatch
from tests.sim.baseline_fakes import _NO

# -- end to end through the engine ------------------------------------------------------------


@pytest.fixture(scope="module")
def small_run() -> dict[str, Any]:
    from sim.engine.requests import Requests
    from sim.experiment import make_workload
    from sim.runner import run_scheme

    dep = builtin_deployment("paper-testbed-14x3")
    cfg = SimConfig()
    levels = Levels.from_deployment(dep)
    wl = make_workload("mixed", 400, 4.0, dep, 3)
    requests = Requests(wl, levels, cfg.chunk_tokens_for(wl.block_tokens))
    names = [
        "consistent_hash",
        "chord",
        "planetserve",
        "central_directory_ideal",
        "skywalker",
        "dynamo",
    ]
    out = {n: run_scheme(n, requests, dep, levels, cfg) for n in names}
    return {"dep": dep, "requests": requests, "results": out}


@pytest.mark.parametrize(
    "name",
    ["consistent_hash", "chord", "planetserve", "central_directory_ideal", "skywalker", "dynamo"],
)
def test_end_to_end__every_request_served_with_finite_ttft(
    small_run: dict[str, Any], name: str
) -> None:
    res = small_run["results"][name]
    dep = small_run["dep"]
    assert np.all((res.record.worker >= 0) & (res.record.worker < dep.n_workers))
    assert np.all(np.isfinite(res.record.ttft_ms)) and np.all(res.record.ttft_ms > 0)
    assert res.summary["false_hit_rate"] <= 0.05


def test_end_to_end__central_directory_ttft_includes_the_lookup(small_run: dict[str, Any]) -> None:
    res = small_run["results"]["central_directory_ideal"]
    dep: Deployment = small_run["dep"]
    origin = small_run["requests"].origin
    d = int(res.scheme_stats["directory_region"])
    wan = dep.wan_matrix_ms
    floor = np.array([2 * (wan[o, d] if o != d else dep.in_region_one_way_ms) for o in origin])
    assert np.all(res.record.ttft_ms >= floor)


def test_end_to_end__hash_placement_reuses_most_and_chord_pays_hops(
    small_run: dict[str, Any],
) -> None:
    r = small_run["results"]
    assert r["chord"].summary["mean_hops"] > 1.0
    assert r["consistent_hash"].summary["reused_tokens"] >= r["skywalker"].summary["reused_tokens"]
    assert r["chord"].summary["ttft_mean_ms"] > r["consistent_hash"].summary["ttft_mean_ms"]


def test_end_to_end__skywalker_stays_local_at_low_load(small_run: dict[str, Any]) -> None:
    res = small_run["results"]["skywalker"]
    dep: Deployment = small_run["dep"]
    origin = small_run["requests"].origin
    local = dep.worker_region[res.record.worker] == origin
    assert local.mean() > 0.9


# -- HolderHistory kernels vs the readable reference ------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sim.schemes._holders import HolderHistory as FastHistory  # noqa: E402
from tests.naive import HolderHistoryTwin  # noqa: E402

_EVENT = st.tuples(
    st.integers(0, 69),  # worker (two mask words when > 63)
    st.floats(0.0, 40.0),  # time step
    st.lists(st.integers(0, 40), max_size=8),  # stored chunk ids
    st.lists(st.integers(0, 40), max_size=8),  # removed chunk ids
)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(_EVENT, min_size=1, max_size=60),
    horizon=st.sampled_from([0.0, 30.0, 200.0]),
    lags=st.lists(st.floats(0.0, 1.0), min_size=3, max_size=3),
    query=st.lists(st.integers(0, 40), min_size=1, max_size=10),
)
def test_holder_history_kernels__match_the_reference(
    events: list[tuple[int, float, list[int], list[int]]],
    horizon: float,
    lags: list[float],
    query: list[int],
) -> None:
    region = np.arange(70, dtype=np.int64) % 3
    fast = FastHistory(region, horizon, capacity=8, ring=2)  # tiny: rebuilds and ring growth
    ref = HolderHistoryTwin(region, horizon)
    t = 0.0
    for w, dt, stored, removed in events:
        t += dt
        batch = CacheEventBatch(
            w,
            t,
            _NO,
            1,
            _NO,
            _NO,
            _NO,
            np.array(stored, dtype=np.int64),
            np.array(removed, dtype=np.int64),
        )
        fast.apply(batch)
        ref.apply(batch)
    # Cutoffs inside the horizon (older ones are clamped differently by design).
    cut = [t - lag * horizon for lag in lags] if horizon > 0 else None
    for node in range(41):
        assert fast.mask(node, cut) == ref.mask(node, cut)
    allowed = (1 << 70) - 1
    out_f = np.zeros(70, dtype=np.int64)
    out_r = np.zeros(70, dtype=np.int64)
    got = fast.match(np.array(query, dtype=np.int64), allowed, cut, out_f)
    want = ref.match(query, allowed, cut, out_r)
    assert got == want
    assert out_f.tolist() == out_r.tolist()


def test_end_to_end__runs_are_deterministic_under_jitter_and_loss() -> None:
    from sim.engine.requests import Requests
    from sim.experiment import make_workload
    from sim.runner import run_scheme

    dep = builtin_deployment("paper-testbed-14x3")
    cfg = SimConfig(wan_jitter_frac=0.3, queue_loss=0.2)
    levels = Levels.from_deployment(dep)
    wl = make_workload("wildchat", 150, 20.0, dep, 5)
    requests = Requests(wl, levels, cfg.chunk_tokens_for(wl.block_tokens))
    for name in ("consistent_hash", "chord", "planetserve", "central_directory_ideal", "skywalker"):
        a = run_scheme(name, requests, dep, levels, cfg)
        b = run_scheme(name, requests, dep, levels, cfg)
        assert np.array_equal(a.record.worker, b.record.worker), name
    a = run_scheme("dynamo", requests, dep, levels, cfg)
    b = run_scheme("dynamo", requests, dep, levels, cfg)
    assert np.array_equal(a.record.ttft_ms, b.record.ttft_ms)
