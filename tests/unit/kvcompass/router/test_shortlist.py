"""The per-region shortlist never drops the best workers: its top k are the kernel's, bit for bit,
on random fleets with ties, every switch combination and in-region-only (infinite WAN) calls."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.router import score as sc
from kvcompass.router import shortlist as sl


@st.composite
def _fleets(
    draw: st.DrawFn,
) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_regions = draw(st.integers(1, 6))
    sizes = rng.integers(1, 6, size=n_regions)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    region = np.repeat(np.arange(n_regions), sizes)
    prompt = int(draw(st.sampled_from([0, 16, 512, 4096])))
    # Coarse values make exact ties (scores and orders) common.
    holds = rng.random(n) < draw(st.sampled_from([0.0, 0.3, 0.9]))
    matched = np.where(holds, rng.integers(0, prompt // 16 + 1, size=n) * 16, 0).astype(np.int64)
    tiers = np.where(matched > 0, rng.integers(1, 3, size=n), rng.integers(0, 3, size=n))
    state = np.zeros((sc.N_STATE_ROWS, n))
    state[sc.ROW_BETA] = rng.choice([0.05, 0.086, 0.1], size=n)
    state[sc.ROW_BELIEF] = rng.choice([0.0, 0.5, 1.0], size=n)
    state[sc.ROW_QUEUE] = rng.choice([0.0, 10.0, 50.0, 400.0], size=n)
    state[sc.ROW_PENDING] = rng.choice([0.0, 0.0, 25.0], size=n)
    wan_of_region = rng.choice([0.0, 20.0, 80.0, 150.0], size=n_regions)
    wan_of_region[0] = 0.0
    state[sc.ROW_WAN] = wan_of_region[region]
    state[sc.ROW_LOCAL] = (region == 0).astype(np.float64)
    state[sc.ROW_N1] = np.where(region == 0, 128.0, 800.0)
    state[sc.ROW_ORDER] = rng.choice([0.0, 1.0, 2.0], size=n)
    if draw(st.booleans()):  # choose_in_region: other regions cannot win
        state[sc.ROW_WAN, region != 0] = np.inf
    params = np.zeros(sc.N_PARAMS)
    params[sc.P_GAMMA] = 0.004
    params[sc.P_TAU] = draw(st.sampled_from([100.0, 1000.0]))
    params[sc.P_LAMBDA_MAX] = 3.0
    for p in (sc.P_LOAD, sc.P_XREGION, sc.P_TIER, sc.P_BELIEF, sc.P_HERD, sc.P_FIX_LAMBDA):
        params[p] = float(draw(st.booleans()))
    params[sc.P_LAMBDA] = draw(st.sampled_from([0.0, 0.5, 3.0]))
    return prompt, matched, tiers.astype(np.uint8), state, params, offsets


@given(fleet=_fleets(), k=st.integers(1, 4))
@settings(max_examples=400, deadline=None)
def test_shortlist__top_k_equal_the_full_kernels(
    fleet: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], k: int
) -> None:
    prompt, matched, tiers, state, params, offsets = fleet
    n = matched.shape[0]
    scores = np.empty(n)
    terms = np.empty((min(k, n), sc.N_TERMS))
    status, winner, lam, *_, best = sc._score_kernel(
        prompt, matched, tiers, state, params, scores, terms
    )
    assert status == sc.STATUS_OK
    agg = np.empty((sl.N_AGG, offsets.shape[0] - 1))
    sl.region_aggregates(state, params, offsets, agg)
    top_r = np.empty(min(k, n), np.int64)
    top_s = np.empty(min(k, n))
    got_lam, scored, regions = sl.shortlist_top(
        prompt, matched, tiers, state, params, offsets, agg, top_r, top_s
    )
    assert got_lam == lam
    assert top_r[0] == winner and top_s[0] == best
    assert top_r.tolist() == terms[:, sc.TERM_WORKER].astype(int).tolist()
    assert top_s.tolist() == terms[:, sc.TERM_SCORE].tolist()  # bit-identical scores
    assert 1 <= regions <= offsets.shape[0] - 1 and scored <= n


def test_shortlist__skips_regions_that_cannot_win() -> None:
    # Region 0 (local, idle, holds the prompt) beats far, loaded regions 1 and 2 by their floor.
    offsets = np.array([0, 4, 8, 12], dtype=np.int64)
    n = 12
    region = np.repeat(np.arange(3), 4)
    state = np.zeros((sc.N_STATE_ROWS, n))
    state[sc.ROW_BETA] = 0.1
    state[sc.ROW_BELIEF] = 1.0
    state[sc.ROW_WAN] = np.array([0.0, 80.0, 200.0])[region]
    state[sc.ROW_QUEUE] = np.array([0.0, 500.0, 900.0])[region]
    state[sc.ROW_LOCAL] = (region == 0).astype(np.float64)
    params = np.zeros(sc.N_PARAMS)
    params[[sc.P_TAU, sc.P_LAMBDA_MAX, sc.P_LOAD, sc.P_XREGION, sc.P_BELIEF]] = [1000, 3, 1, 1, 1]
    matched = np.zeros(n, np.int64)
    matched[2] = 4096
    tiers = np.where(matched > 0, 1, 0).astype(np.uint8)
    agg = np.empty((sl.N_AGG, 3))
    sl.region_aggregates(state, params, offsets, agg)
    top_r, top_s = np.empty(1, np.int64), np.empty(1)
    _, scored, regions = sl.shortlist_top(4096, matched, tiers, state, params, offsets, agg,
                                          top_r, top_s)  # fmt: skip
    assert top_r[0] == 2 and (scored, regions) == (4, 1)
