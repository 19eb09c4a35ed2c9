"""The joint score over every worker (paper §3.4): one trusting njit kernel and its wrapper.

    score(r) = WAN(o,r) + Tq(r) + (1+λ)·β_r·(L − b_r·m_r) + γ·b_r·m_r·[t_r = DRAM]
    λ        = min(λ_max, min_r' Tq(r') / τ)

Owns the arithmetic and the packed layouts the kernel reads; it must not keep state between
calls or know where the inputs come from (the Router owns the queue view and the beliefs).

Packed per-worker state, ``state`` float64 (N_STATE_ROWS, W), one row per quantity:

    ROW_BETA     β_r, prefill ms/token            ROW_WAN    added round trip from o, ms
    ROW_BELIEF   b_r in [0, 1]                    ROW_N1     n1(o, region(r)), tokens
    ROW_QUEUE    Tq estimate, ms                  ROW_LOCAL  1.0 if r is in o's region else 0.0
    ROW_PENDING  herding-guard work forwarded since r's last refresh, ms
    ROW_ORDER    tie-break: among exactly equal scores the lower value wins, then the lower id
                 (the decider writes when it last sent work to each worker: the least recently
                 used of equally good workers, so idle workers share the load; zeros: by id)

Parameters, ``params`` float64 (N_PARAMS,): γ ms/token, τ ms, λ_max, then the switches
load_aware, cross_region_reuse, tier_aware, use_belief, herding_guard as 0.0/1.0, then
P_FIX_LAMBDA (0.0/1.0) and P_LAMBDA: when P_FIX_LAMBDA is on, λ is P_LAMBDA instead of being
derived from the queue row (the owning region re-scores a relayed request at the origin's λ, so
its scores and the origin's are priced alike; ``kvcompass.decider``).
One array per kind keeps the njit call to six arguments: unboxing is the main per-call cost.

Explain terms, ``top_terms`` float64 (k, N_TERMS), one row per candidate, best first, columns
TERM_SCORE … TERM_WORKER below (ids and token counts are exact in float64). TERM_PREFILL
includes the (1+λ) factor; TERM_QUEUE includes the herding-guard work when that switch is on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.costs import prefill_ms
from kvcompass.errors import InvalidInputError

ROW_BETA, ROW_BELIEF, ROW_QUEUE, ROW_PENDING, ROW_WAN, ROW_N1, ROW_LOCAL, ROW_ORDER = range(8)
N_STATE_ROWS = 8

P_GAMMA, P_TAU, P_LAMBDA_MAX, P_LOAD, P_XREGION, P_TIER, P_BELIEF, P_HERD = range(8)
P_FIX_LAMBDA, P_LAMBDA = 8, 9
N_PARAMS = 10

TERM_SCORE, TERM_WAN, TERM_QUEUE, TERM_PREFILL, TERM_RELOAD = range(5)
TERM_MATCHED, TERM_EFFECTIVE, TERM_BELIEF, TERM_TIER, TERM_WORKER = range(5, 10)
N_TERMS = 10

STATUS_OK, STATUS_NEGATIVE_MATCH, STATUS_MATCH_TOO_LONG, STATUS_BAD_TIER = range(4)
_TIER_DRAM = 2

KernelResult = tuple[int, int, float, float, int, bool, int, float, int, float]


@njit(cache=True)
def _terms(
    r: int,
    prompt_tokens: int,
    matched: Any,
    tiers: Any,
    state: Any,
    params: Any,
    lam: float,
) -> tuple[float, float, float, float, float, int, float, float]:
    """(score, wan, queue, prefill, reload, m as scored, effective b·m, belief) of worker r."""
    load_aware = params[P_LOAD] != 0.0
    local = state[ROW_LOCAL, r] != 0.0
    m = matched[r] if (local or params[P_XREGION] != 0.0) else 0
    b = state[ROW_BELIEF, r] if params[P_BELIEF] != 0.0 else 1.0
    q = 0.0
    if load_aware:
        q = state[ROW_QUEUE, r]
        if params[P_HERD] != 0.0:
            q += state[ROW_PENDING, r]
    eff = b * m if params[P_BELIEF] != 0.0 else float(m)
    prefill = (1.0 + lam) * state[ROW_BETA, r] * (prompt_tokens - eff)
    reload = 0.0
    if m > 0 and tiers[r] == _TIER_DRAM and params[P_TIER] != 0.0:
        reload = params[P_GAMMA] * eff
    wan = state[ROW_WAN, r]
    return wan + q + prefill + reload, wan, q, prefill, reload, m, eff, b


@njit(cache=True)
def _score_kernel(
    prompt_tokens: int,
    matched: Any,
    tiers: Any,
    state: Any,
    params: Any,
    scores: Any,
    terms: Any,
) -> KernelResult:
    """Score every worker into ``scores``, the best k into ``terms``; return the facts.

    Returns (status, winner, λ, min Tq, best local holder or -1, it lost to load, longest remote
    holder with m >= n1 or -1, winner's predicted service ms, winner's m as scored, its score).
    ``terms`` is a caller-owned (k, N_TERMS) buffer, k <= W: allocating and boxing result arrays
    would cost more than the whole score at W = 128.
    Ties go to the lower worker id. Trusts shapes and dtypes; checks values in the same pass.
    """
    n = matched.shape[0]
    for r in range(n):
        if matched[r] < 0:
            return STATUS_NEGATIVE_MATCH, r, 0.0, 0.0, -1, False, -1, 0.0, 0, 0.0
        if matched[r] > prompt_tokens:
            return STATUS_MATCH_TOO_LONG, r, 0.0, 0.0, -1, False, -1, 0.0, 0, 0.0
        if tiers[r] > _TIER_DRAM or (matched[r] > 0 and tiers[r] == 0):
            return STATUS_BAD_TIER, r, 0.0, 0.0, -1, False, -1, 0.0, 0, 0.0

    # Flags and rows hoisted into locals: the compiler cannot prove they do not alias the
    # output buffers, and reloading them per worker doubled the kernel's time at W = 128.
    gamma = params[P_GAMMA]
    load_aware = params[P_LOAD] != 0.0
    xregion = params[P_XREGION] != 0.0
    tier_aware = params[P_TIER] != 0.0
    use_belief = params[P_BELIEF] != 0.0
    herd = params[P_HERD] != 0.0
    beta = state[ROW_BETA]
    belief = state[ROW_BELIEF]
    queue = state[ROW_QUEUE]
    pending = state[ROW_PENDING]
    wan = state[ROW_WAN]
    n1 = state[ROW_N1]
    local = state[ROW_LOCAL]
    order = state[ROW_ORDER]

    lam = 0.0
    min_q = 0.0
    if load_aware:
        min_q = np.inf
        for r in range(n):
            q = queue[r] + pending[r] if herd else queue[r]
            min_q = min(min_q, q)
        lam = min(params[P_LAMBDA_MAX], min_q / params[P_TAU])
    if params[P_FIX_LAMBDA] != 0.0:
        lam = params[P_LAMBDA]
    scale = 1.0 + lam

    k = min(n, terms.shape[0])
    top_s = np.empty(k, np.float64)
    top_r = np.full(k, -1, np.int64)
    winner = 0
    best = np.inf
    holder = -1
    holder_score = np.inf
    remote = -1
    for r in range(n):
        is_local = local[r] != 0.0
        m = matched[r] if (is_local or xregion) else 0
        eff = belief[r] * m if use_belief else float(m)
        q = 0.0
        if load_aware:
            q = queue[r] + pending[r] if herd else queue[r]
        reload = gamma * eff if (tier_aware and m > 0 and tiers[r] == _TIER_DRAM) else 0.0
        # Same operation order as _terms, so explain rows equal these scores bit for bit.
        prefill = scale * beta[r] * (prompt_tokens - eff)
        s = wan[r] + q + prefill + reload
        scores[r] = s
        if s < best or (s == best and order[r] < order[winner]):
            best, winner = s, r
        if is_local:
            if m > 0 and (s < holder_score or (s == holder_score and order[r] < order[holder])):
                holder, holder_score = r, s
        elif m > 0 and m >= n1[r]:
            longer = remote < 0 or m > matched[remote]
            if longer or (m == matched[remote] and wan[r] < wan[remote]):
                remote = r
        # Insertion into the sorted top-k by (score, order); the lower id stays first among
        # equals (strict comparisons, ascending r).
        last = top_r[k - 1]
        if last < 0 or s < top_s[k - 1] or (s == top_s[k - 1] and order[r] < order[last]):
            j = k - 1
            while j > 0 and (
                top_r[j - 1] < 0
                or s < top_s[j - 1]
                or (s == top_s[j - 1] and order[r] < order[top_r[j - 1]])
            ):
                top_s[j] = top_s[j - 1]
                top_r[j] = top_r[j - 1]
                j -= 1
            top_s[j] = s
            top_r[j] = r

    winner_is_holder = local[winner] != 0.0 and matched[winner] > 0
    lost_to_load = False
    if holder >= 0 and not winner_is_holder:
        # Without the queue terms the holder would have been at least as good: load decided.
        _, _, hq, _, _, _, _, _ = _terms(holder, prompt_tokens, matched, tiers, state, params, lam)
        _, _, wq, _, _, _, _, _ = _terms(winner, prompt_tokens, matched, tiers, state, params, lam)
        lost_to_load = holder_score - hq <= best - wq

    _, _, _, _, w_reload, w_m, w_eff, _ = _terms(
        winner, prompt_tokens, matched, tiers, state, params, lam
    )
    service = prefill_ms(beta[winner], prompt_tokens - w_eff, gamma, w_eff if w_reload else 0.0)

    for j in range(k):
        pick = top_r[j]
        s, wq, q, prefill, reload, m, eff, b = _terms(
            pick, prompt_tokens, matched, tiers, state, params, lam
        )
        terms[j, TERM_WORKER] = pick
        terms[j, TERM_SCORE] = s
        terms[j, TERM_WAN] = wq
        terms[j, TERM_QUEUE] = q
        terms[j, TERM_PREFILL] = prefill
        terms[j, TERM_RELOAD] = reload
        terms[j, TERM_MATCHED] = m
        terms[j, TERM_EFFECTIVE] = eff
        terms[j, TERM_BELIEF] = b
        terms[j, TERM_TIER] = tiers[pick]
    return STATUS_OK, winner, lam, min_q, holder, lost_to_load, remote, service, w_m, best


def raise_for_status(status: int, worker: int, prompt_tokens: int, matched: NDArray[Any]) -> None:
    """Turn a kernel status into the precise InvalidInputError (no-op for STATUS_OK)."""
    if status == STATUS_OK:
        return
    if status == STATUS_NEGATIVE_MATCH:
        got = f"matched_tokens[{worker}] = {int(matched[worker])}"
        raise InvalidInputError(f"expected matched_tokens >= 0, got {got}")
    if status == STATUS_MATCH_TOO_LONG:
        got = f"matched_tokens[{worker}] = {int(matched[worker])} > prompt_tokens {prompt_tokens}"
        raise InvalidInputError(f"expected matched_tokens <= prompt_tokens, got {got}")
    raise InvalidInputError(
        f"expected tiers[{worker}] in {{1 VRAM, 2 DRAM}} where matched > 0 and <= 2 elsewhere, "
        f"got a tier inconsistent with matched_tokens[{worker}] = {int(matched[worker])}"
    )


def check_request_arrays(
    prompt_tokens: int, matched: NDArray[Any], tiers: NDArray[Any], n_workers: int
) -> None:
    """Validate the dtypes and shapes of one request's index answer (values: in the kernel)."""
    if not isinstance(matched, np.ndarray) or matched.dtype != np.int64:
        raise InvalidInputError(
            f"expected matched_tokens as int64 ndarray, got {type(matched).__name__} "
            f"{getattr(matched, 'dtype', '')}"
        )
    if not isinstance(tiers, np.ndarray) or tiers.dtype != np.uint8:
        raise InvalidInputError(
            f"expected tiers as uint8 ndarray, got {type(tiers).__name__} "
            f"{getattr(tiers, 'dtype', '')}"
        )
    if matched.shape != (n_workers,) or tiers.shape != (n_workers,):
        raise InvalidInputError(
            f"expected matched_tokens and tiers of shape ({n_workers},), "
            f"got {matched.shape} and {tiers.shape}"
        )
    if prompt_tokens < 0:
        raise InvalidInputError(f"expected prompt_tokens >= 0, got {prompt_tokens}")


def score_workers(
    prompt_tokens: int,
    matched_tokens: NDArray[np.int64],
    tiers: NDArray[np.uint8],
    state: NDArray[np.float64],
    params: NDArray[np.float64],
) -> tuple[NDArray[np.float64], float, int]:
    """Validating wrapper: (score of every worker, λ, winner) for packed ``state``/``params``.

    The Router calls the kernel directly on state it validated at construction; this entry
    point is for tests, benchmarks and tools that build the packed arrays themselves.
    """
    if state.dtype != np.float64 or state.ndim != 2 or state.shape[0] != N_STATE_ROWS:
        raise InvalidInputError(
            f"expected state float64 ({N_STATE_ROWS}, W), got {state.dtype} {state.shape}"
        )
    if params.dtype != np.float64 or params.shape != (N_PARAMS,):
        raise InvalidInputError(
            f"expected params float64 ({N_PARAMS},), got {params.dtype} {params.shape}"
        )
    if not np.all(np.isfinite(state)) or params[P_TAU] <= 0:
        raise InvalidInputError("expected finite state and tau > 0, got otherwise")
    n = state.shape[1]
    if n < 1:
        raise InvalidInputError("expected at least one worker, got W = 0")
    check_request_arrays(prompt_tokens, matched_tokens, tiers, n)
    scores = np.empty(n, np.float64)
    terms = np.empty((1, N_TERMS), np.float64)
    status, winner, lam, *_ = _score_kernel(
        prompt_tokens, matched_tokens, tiers, np.ascontiguousarray(state), params, scores, terms
    )
    raise_for_status(status, winner, prompt_tokens, matched_tokens)
    return scores, lam, winner


def capacity_price(queue_ms: NDArray[np.float64], tau_ms: float, lambda_max: float) -> float:
    """λ = min(λ_max, min_r Tq(r) / τ): the kernel's formula, for callers and property tests.

    Capped at λ_max and 1/τ-Lipschitz in the estimates (sup norm), since min and the cap are
    both 1-Lipschitz: one stale estimate moves λ by at most its error / τ.
    """
    if queue_ms.ndim != 1 or queue_ms.shape[0] < 1 or tau_ms <= 0:
        raise InvalidInputError(
            f"expected a non-empty 1-d queue vector and tau_ms > 0, got {queue_ms.shape}, {tau_ms}"
        )
    return float(min(lambda_max, float(queue_ms.min()) / tau_ms))
