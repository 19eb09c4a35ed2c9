"""No scheme reuses more than an infinite cache could (issue 14, item 3).

The bound is computed here from the workload's block ids alone, without the simulator: request
i can reuse at most its longest run of leading *full* blocks that is also a run of leading full
blocks of some other request's prompt (an infinite cache holding every prompt ever prefilled,
by anyone, at any time: arrival order is not used, because a request sent across the WAN may
reach its worker after a later local one). Every registered scheme that is not an ablation
variant replays the same small workloads (the Mooncake trace's first requests, rescaled to load
the pool, and Mixed), and its per-request reuse must stay within the bound.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.deployment import builtin_deployment
from kvcompass.levels import Levels
from sim import schemes
from sim.config import SimConfig
from sim.datasets import MOONCAKE_TRACE
from sim.engine.requests import Requests
from sim.experiment import load_trace_workload
from sim.runner import run_scheme
from sim.workloads import WORKLOADS
from sim.workloads.workload import Workload
from tests.ci import require_file

DEP = builtin_deployment("paper-testbed-14x3")
SCHEMES = [*schemes.ALL, *schemes.IDEAL]


def infinite_cache_bound(wl: Workload) -> np.ndarray:
    """Per request: tokens of its longest full-block prefix that another prompt also has."""
    bt = wl.block_tokens
    rows = [
        tuple(int(b) for b in wl.blocks_of(i)[: int(wl.prompt_len[i]) // bt])
        for i in range(len(wl))
    ]
    holders: dict[tuple[int, ...], set[int]] = {}
    for i, row in enumerate(rows):
        for k in range(1, len(row) + 1):
            holders.setdefault(row[:k], set()).add(i)
    bound = np.zeros(len(wl), dtype=np.int64)
    for i, row in enumerate(rows):
        k = len(row)
        while k > 0 and not (holders[row[:k]] - {i}):
            k -= 1
        bound[i] = k * bt
    return bound


def _workload(kind: str) -> Workload:
    if kind == "trace":
        path = require_file(MOONCAKE_TRACE)
        return load_trace_workload(path, "mooncake", 512, DEP, 300, 1, 8.0)
    weights = np.array([r.n_workers for r in DEP.regions], dtype=np.float64)
    return WORKLOADS["mixed"](400, 40.0, DEP.n_regions, weights, np.random.default_rng(3))


@pytest.fixture(scope="module", params=["mixed", "trace"])
def case(request: pytest.FixtureRequest) -> tuple[Workload, Requests, np.ndarray]:
    wl = _workload(request.param)
    chunk = SimConfig().chunk_tokens_for(wl.block_tokens)
    return wl, Requests(wl, Levels.from_deployment(DEP), chunk), infinite_cache_bound(wl)


def test_bound__is_tight_somewhere_and_zero_for_unshared_prompts(
    case: tuple[Workload, Requests, np.ndarray],
) -> None:
    wl, _, bound = case
    assert bound.sum() > 0  # the workload does share prefixes
    assert np.all(bound <= wl.prompt_len)


@pytest.mark.parametrize("name", SCHEMES)
def test_every_scheme__reuses_no_more_than_an_infinite_cache(
    name: str, case: tuple[Workload, Requests, np.ndarray]
) -> None:
    _, requests, bound = case
    rec = run_scheme(name, requests, DEP, Levels.from_deployment(DEP), SimConfig()).record
    over = np.flatnonzero(rec.reused > bound)
    assert over.size == 0, (
        f"{name}: request {over[:5]} reused {rec.reused[over[:5]]} > {bound[over[:5]]}"
    )
    assert int(rec.reused.sum()) <= int(bound.sum())
