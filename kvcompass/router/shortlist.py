"""Per-region lower bounds of the joint score: score a large fleet without visiting every worker.

Owns two pure njit functions over the score's packed layout (``kvcompass.router.score``):
``region_aggregates`` (per region: the least WAN + queue, the least queue, the least β, the
largest belief — what changes only when the router's state does) and ``shortlist_top`` (per
request: a lower bound of every region, regions scored exactly in increasing bound order, a
region skipped as soon as its bound exceeds the k-th best score found). Must not keep state,
allocate per worker or differ from ``score._score_kernel`` in any result it returns. The Router
does not call it (wiring it is the lead's decision); ``bench/forwarding.py`` measures it.

Why it keeps the best workers. For a worker r of region g, with scale = 1 + λ >= 0::

    score(r) = (wan_r + q_r) + scale·β_r·(L − eff_r) + reload_r
             >= floor_g      + scale·β_min,g·(L − eff_max,g) + 0       = bound(g)

since floor_g = min over g of (wan + q), β_r >= β_min,g > 0, eff_r = b_r·m_r <= b_max,g·m_max,g
= eff_max,g, reload >= 0 and, while L − eff_max,g >= 0, the product is smallest at the smallest
β and the largest eff. Each step is one IEEE operation on the same operands in the same order as
the kernel, or on a smaller one, and rounding is monotone, so the floating-point bound is <= the
floating-point score (when L − eff_max,g < 0, possible only with a belief above 1, the region's
bound is −inf: always scored). A skipped region's every score is >= its bound > the k-th best
found, so it can hold none of the k best by (score, order, id), the kernel's order: the top k,
and so the winner, are the kernel's (``tests/unit/kvcompass/router/test_shortlist.py`` checks it
on random fleets with ties).

Workers are numbered region by region (``Deployment``), so a region is ``offsets[g]:offsets[g+1]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from kvcompass.router.score import (
    _TIER_DRAM,
    P_BELIEF,
    P_FIX_LAMBDA,
    P_GAMMA,
    P_HERD,
    P_LAMBDA,
    P_LAMBDA_MAX,
    P_LOAD,
    P_TAU,
    P_TIER,
    P_XREGION,
    ROW_BELIEF,
    ROW_BETA,
    ROW_LOCAL,
    ROW_ORDER,
    ROW_PENDING,
    ROW_QUEUE,
    ROW_WAN,
)

AGG_FLOOR, AGG_QUEUE, AGG_BETA, AGG_BELIEF = range(4)
N_AGG = 4


@njit(cache=True)
def region_aggregates(state: Any, params: Any, offsets: Any, out: Any) -> None:
    """Fill ``out`` (N_AGG, R): per region the least wan + q, the least q, the least β and the
    largest belief (1.0 when beliefs are off), q as the kernel forms it (queue, + pending with
    the herding guard, 0 without load awareness). O(W); recompute a region when its rows move."""
    load_aware = params[P_LOAD] != 0.0
    herd = params[P_HERD] != 0.0
    use_belief = params[P_BELIEF] != 0.0
    for g in range(offsets.shape[0] - 1):
        floor = np.inf
        qmin = np.inf
        bmin = np.inf
        belief = 0.0 if use_belief else 1.0
        for r in range(offsets[g], offsets[g + 1]):
            q = 0.0
            if load_aware:
                q = state[ROW_QUEUE, r] + state[ROW_PENDING, r] if herd else state[ROW_QUEUE, r]
            floor = min(floor, state[ROW_WAN, r] + q)
            qmin = min(qmin, q)
            bmin = min(bmin, state[ROW_BETA, r])
            if use_belief:
                belief = max(belief, state[ROW_BELIEF, r])
        out[AGG_FLOOR, g] = floor
        out[AGG_QUEUE, g] = qmin
        out[AGG_BETA, g] = bmin
        out[AGG_BELIEF, g] = belief


@njit(cache=True)
def _before(s: float, o: float, r: int, s2: float, o2: float, r2: int) -> bool:
    """(s, o, r) sorts before (s2, o2, r2): the kernel's order (score, then order, then id)."""
    return s < s2 or (s == s2 and (o < o2 or (o == o2 and r < r2)))


@njit(cache=True)
def shortlist_top(
    prompt_tokens: int,
    matched: Any,
    tiers: Any,
    state: Any,
    params: Any,
    offsets: Any,
    agg: Any,
    top_r: Any,
    top_s: Any,
) -> tuple[float, int, int]:
    """The k = ``top_r.shape[0]`` best workers by (score, order, id) into ``top_r``/``top_s``
    (-1 / inf past the fleet's size), scoring only regions whose bound can still beat the k-th.

    ``agg`` is ``region_aggregates`` of the same state. Returns (λ, workers scored, regions
    scored). Trusts shapes and values (``score.check_request_arrays`` and the kernel's checks).
    """
    n_regions = offsets.shape[0] - 1
    k = top_r.shape[0]
    xregion = params[P_XREGION] != 0.0
    use_belief = params[P_BELIEF] != 0.0
    load_aware = params[P_LOAD] != 0.0
    herd = params[P_HERD] != 0.0
    tier_aware = params[P_TIER] != 0.0
    gamma = params[P_GAMMA]
    lam = 0.0
    if load_aware:
        min_q = np.inf
        for g in range(n_regions):
            min_q = min(min_q, agg[AGG_QUEUE, g])
        lam = min(params[P_LAMBDA_MAX], min_q / params[P_TAU])
    if params[P_FIX_LAMBDA] != 0.0:
        lam = params[P_LAMBDA]
    scale = 1.0 + lam

    bound = np.empty(n_regions, np.float64)
    for g in range(n_regions):
        m_max = 0
        for r in range(offsets[g], offsets[g + 1]):
            if (state[ROW_LOCAL, r] != 0.0 or xregion) and matched[r] > m_max:
                m_max = matched[r]
        eff_max = agg[AGG_BELIEF, g] * m_max if use_belief else float(m_max)
        rest = prompt_tokens - eff_max
        if scale < 0.0 or rest < 0.0:
            bound[g] = -np.inf
        else:
            bound[g] = agg[AGG_FLOOR, g] + scale * agg[AGG_BETA, g] * rest

    for j in range(k):
        top_r[j] = -1
        top_s[j] = np.inf
    order = state[ROW_ORDER]
    scored = 0
    regions = 0
    for g in np.argsort(bound, kind="mergesort"):
        if top_r[k - 1] >= 0 and bound[g] > top_s[k - 1]:
            break  # sorted: every later region's bound is at least this one's
        regions += 1
        for r in range(offsets[g], offsets[g + 1]):
            # The kernel's arithmetic, in its operation order (bit-identical scores).
            is_local = state[ROW_LOCAL, r] != 0.0
            m = matched[r] if (is_local or xregion) else 0
            eff = state[ROW_BELIEF, r] * m if use_belief else float(m)
            q = 0.0
            if load_aware:
                q = state[ROW_QUEUE, r] + state[ROW_PENDING, r] if herd else state[ROW_QUEUE, r]
            reload = gamma * eff if (tier_aware and m > 0 and tiers[r] == _TIER_DRAM) else 0.0
            prefill = scale * state[ROW_BETA, r] * (prompt_tokens - eff)
            s = state[ROW_WAN, r] + q + prefill + reload
            scored += 1
            last = top_r[k - 1]
            if last >= 0 and not _before(s, order[r], r, top_s[k - 1], order[last], last):
                continue
            j = k - 1
            while j > 0 and (
                top_r[j - 1] < 0
                or _before(s, order[r], r, top_s[j - 1], order[top_r[j - 1]], top_r[j - 1])
            ):
                top_s[j] = top_s[j - 1]
                top_r[j] = top_r[j - 1]
                j -= 1
            top_s[j] = s
            top_r[j] = r
    return lam, scored, regions
