"""Small simulator scenarios with asserted orderings between schemes (architecture §9, paper
§5.3-5.4).

Each scenario runs in seconds: a few thousand requests on the 14-worker testbed deployment, or a
handful of hand-built requests on a two-region toy deployment.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.deployment import builtin_deployment
from kvcompass.levels import Levels
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.experiment import make_workload, run_all
from sim.runner import RunResult, run_scheme
from tests.sim._tiny import path, two_regions, workload

TESTBED = "paper-testbed-14x3"


@pytest.fixture(scope="module")
def testbed_runs() -> dict[str, RunResult]:
    """Mixed on the 14-worker testbed at ~1.2x its no-reuse capacity (14 / (L·β) ≈ 42 req/s)."""
    dep = builtin_deployment(TESTBED)
    wl = make_workload("mixed", 3000, 50.0, dep, seed=3)
    cfg = SimConfig(seed=3, eviction="lfu")
    return run_all(
        wl,
        dep,
        ["kvcompass", "kvcompass_no_load_aware", "consistent_hash", "oracle"],
        cfg,
    )


def test_hash_placement_concentrates_hot_prefixes__at_load(
    testbed_runs: dict[str, RunResult],
) -> None:
    ch, kvc = testbed_runs["consistent_hash"].summary, testbed_runs["kvcompass"].summary
    assert ch["peak_load_factor"] > kvc["peak_load_factor"] + 0.2
    assert ch["ttft_p99_ms"] > 1.5 * kvc["ttft_p99_ms"]


def test_kvcompass_balances_load__close_to_the_oracle(testbed_runs: dict[str, RunResult]) -> None:
    kvc, oracle = testbed_runs["kvcompass"].summary, testbed_runs["oracle"].summary
    assert kvc["peak_load_factor"] <= oracle["peak_load_factor"] * 1.15


def test_no_load_aware_ablation__loses_throughput(testbed_runs: dict[str, RunResult]) -> None:
    full = testbed_runs["kvcompass"].summary
    ablated = testbed_runs["kvcompass_no_load_aware"].summary
    assert ablated["throughput_tok_s"] < full["throughput_tok_s"]
    assert ablated["ttft_p99_ms"] > full["ttft_p99_ms"]


def _two_request_run(shared_tokens: int) -> RunResult:
    """Region b computes a prefix; later an edge in region a sees a prompt sharing it."""
    dep = two_regions(one_way_ms=100.0, beta=0.1)  # n1(a, b) = ceil(200 / 0.1) = 2000 tokens
    blocks = shared_tokens // 16
    wl = workload(
        [path(1, blocks, 0, 2), path(1, blocks, 1, 2)],
        arrival_ms=[0.0, 5_000.0],
        origin=[1, 0],
    )
    levels = Levels.from_deployment(dep)
    cfg = SimConfig(seed=1)
    req = Requests(wl, levels, cfg.chunk_tokens_for(16))
    return run_scheme("kvcompass", req, dep, levels, cfg)


def test_remote_holder_below_n1__is_not_used() -> None:
    run = _two_request_run(1504)  # below n1 = 2000: the edge never even asks for it
    assert run.record.worker.tolist() == [1, 0]
    assert run.record.claimed[1] == 0


def test_remote_holder_above_n1__is_used_when_it_saves_more_than_the_wan() -> None:
    run = _two_request_run(4000)  # saves 0.1 * 4000 = 400 ms of prefill for a 200 ms round trip
    assert run.record.worker.tolist() == [1, 1]
    assert run.record.claimed[1] == 4000
    assert run.record.reused[1] >= 4000 - 64


def test_same_seed__identical_results() -> None:
    dep = builtin_deployment(TESTBED)
    wl = make_workload("mixed", 600, 30.0, dep, seed=7)
    cfg = SimConfig(seed=7, wan_jitter_frac=0.5, index_loss=0.1)
    a = run_all(wl, dep, ["kvcompass"], cfg)["kvcompass"]
    b = run_all(wl, dep, ["kvcompass"], cfg)["kvcompass"]
    for field in ("worker", "ttft_ms", "e2e_ms", "reused", "claimed"):
        assert np.array_equal(getattr(a.record, field), getattr(b.record, field)), field
    keys = [k for k in a.summary if k not in ("wall_s", "sim_requests_per_s")]
    assert {k: a.summary[k] for k in keys} == {k: b.summary[k] for k in keys}


def test_burst__the_owning_region_booking_spreads_what_edges_deciding_alone_herd() -> None:
    """The burst workload (issue 25 item 5): every edge sees one holder of a new long prefix
    and a burst arrives from every region inside one WAN one-way. Without booking each edge
    sends its share to the holder and the tail queues there; the holder's region books."""
    dep = builtin_deployment(TESTBED)
    wl = make_workload("burst", 480, 8.0, dep, seed=2, origins="uniform")
    runs = run_all(wl, dep, ["kvcompass", "kvcompass_no_booking"], SimConfig(seed=2))
    booked, alone = runs["kvcompass"].summary, runs["kvcompass_no_booking"].summary
    assert alone["ttft_p99_ms"] > 1.1 * booked["ttft_p99_ms"]
    assert alone["peak_load_factor"] > booked["peak_load_factor"]
    assert booked["relays"] > 0 and alone["relays"] == 0
