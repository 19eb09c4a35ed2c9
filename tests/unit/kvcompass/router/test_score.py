"""The joint score: the paper's behaviours (§3.4) and the kernel against its naive twin."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.router import RouterConfig, capacity_price, score_workers
from kvcompass.router import score as sc
from tests.naive import router_joint_score

from .conftest import BETA, PROMPT, W, build_router, request


def test_idle_recompute_beats_congested_holder__o4() -> None:
    router = build_router()
    router.set_local_queues([900.0, 0.0, 0.0, 0.0], now_ms=0.0)
    matched, tiers = request({0: 2048})
    d = router.choose(PROMPT, matched, tiers, now_ms=0.0)
    # holder: 900 + 0.1·2048 = 1104.8 ms; idle worker 1: 0.1·4096 = 409.6 ms.
    assert d.worker == 1
    assert d.lambda_price == 0.0
    assert d.local_holder == 0 and d.local_holder_lost_to_load
    assert not d.winner_is_local_holder


def test_holder_wins__when_not_congested() -> None:
    router = build_router()
    router.set_local_queues([50.0, 0.0, 0.0, 0.0], now_ms=0.0)
    d = router.choose(PROMPT, *request({0: 2048}), now_ms=0.0)
    assert d.worker == 0 and d.winner_is_local_holder and d.claimed_tokens == 2048


@given(rtt=st.floats(5.0, 500.0), beta=st.floats(0.01, 1.0), frac=st.floats(0.0, 0.999))
@settings(max_examples=100, deadline=None)
def test_remote_holder_below_n1_loses_to_local_recompute__any_rtt(
    rtt: float, beta: float, frac: float
) -> None:
    from kvcompass.router import Router

    n1 = math.ceil(rtt / beta)  # the shortest match whose saving covers the round trip
    m = int(frac * n1)
    if m >= n1:
        return
    prompt = n1 + 64
    wr = np.array([0, 1], np.int64)
    router = Router(
        0, wr, np.full(2, beta), np.array([[0.0, rtt], [rtt, 0.0]]), np.array([[16, n1], [n1, 16]])
    )
    matched = np.array([0, m], np.int64)
    tiers = np.array([0, 1 if m else 0], np.uint8)
    d = router.choose(prompt, matched, tiers, now_ms=0.0)
    assert d.worker == 0
    assert d.remote_holder == -1  # below n1: not a migration source either


def test_remote_holder_above_n1_wins__when_all_idle() -> None:
    router = build_router()
    d = router.choose(PROMPT, *request({4: 2048}), now_ms=0.0)
    # remote: 80 + 0.1·(4096-2048) = 284.8 < local recompute 409.6
    assert d.worker == 4
    assert d.remote_holder == 4 and d.remote_holder_tokens == 2048


def test_dram_hit_pays_gamma_per_token__and_not_when_tier_blind() -> None:
    for tier_aware in (True, False):
        router = build_router(tier_aware=tier_aware)
        vram = router.choose(PROMPT, *request({0: 2048}), now_ms=0.0)
        dram = router.choose(PROMPT, *request({0: 2048}, dram=(0,)), now_ms=0.0)
        gamma = router.gamma_ms_per_token if tier_aware else 0.0
        assert dram.score_ms - vram.score_ms == pytest.approx(gamma * 2048)
        assert dram.explain()[0].reload_ms == pytest.approx(gamma * 2048)


def test_gamma__llama8b_bf16_over_25gbps() -> None:
    assert RouterConfig().gamma_ms_per_token == pytest.approx(131072 / 25e9 * 1e3)


def test_low_belief_discounts_holder() -> None:
    router = build_router()
    matched, tiers = request({0: 3072, 1: 1024})
    assert router.choose(PROMPT, matched, tiers, now_ms=0.0).worker == 0
    for _ in range(10):  # worker 0 keeps claiming 3072 and reusing nothing
        router.on_response(0, claimed_tokens=3072, reused_tokens=0, now_ms=0.0)
    d = router.choose(PROMPT, matched, tiers, now_ms=0.0)
    assert d.worker == 1
    b0 = float(router.belief.belief[0])
    terms = {t.worker: t for t in d.explain()}
    assert terms[0].effective_tokens == pytest.approx(b0 * 3072)
    assert terms[0].prefill_ms == pytest.approx(BETA * (PROMPT - b0 * 3072))


def test_belief_ignored__when_use_belief_off() -> None:
    router = build_router(use_belief=False)
    for _ in range(10):
        router.on_response(0, claimed_tokens=3072, reused_tokens=0, now_ms=0.0)
    assert router.choose(PROMPT, *request({0: 3072, 1: 1024}), now_ms=0.0).worker == 0


def test_lambda__zero_with_an_idle_worker_and_rising_to_max_as_pool_saturates() -> None:
    router = build_router()
    tau = router.tau_ms
    assert tau == pytest.approx(BETA * 2048)
    router.on_broadcast(1, [4, 5, 6, 7], [5000.0] * 4, now_ms=0.0)
    router.on_broadcast(2, [8, 9], [5000.0] * 2, now_ms=0.0)
    router.set_local_queues([5000.0, 5000.0, 5000.0, 0.0], now_ms=0.0)
    assert router.choose(PROMPT, *request(), now_ms=0.0).lambda_price == 0.0
    lams = []
    for q in (10.0, 100.0, 0.5 * tau, tau, 4 * tau, 8 * tau, 100 * tau):
        router.set_local_queues([5000.0, 5000.0, 5000.0, q], now_ms=0.0)
        lams.append(router.choose(PROMPT, *request(), now_ms=0.0).lambda_price)
    assert lams == sorted(lams)
    assert lams[0] == pytest.approx(10.0 / tau)
    assert lams[3] == pytest.approx(1.0)
    assert lams[-2] == pytest.approx(8.0) and lams[-1] == 8.0


def test_saturated_pool_shifts_choice_toward_holder() -> None:
    # At λ = 0 the idle-ish worker 1 wins; once every queue is long, reuse is priced up.
    router = build_router()
    router.on_broadcast(1, [4, 5, 6, 7], [1e5] * 4, now_ms=0.0)
    router.on_broadcast(2, [8, 9], [1e5] * 2, now_ms=0.0)
    router.set_local_queues([300.0, 1.0, 1e5, 1e5], now_ms=0.0)
    assert router.choose(PROMPT, *request({0: 2048}), now_ms=0.0).worker == 1
    router.set_local_queues([1300.0, 1001.0, 1e5, 1e5], now_ms=0.0)
    d = router.choose(PROMPT, *request({0: 2048}), now_ms=0.0)
    assert d.lambda_price > 4 and d.worker == 0


def test_load_blind_ablation__congested_holder_wins() -> None:
    router = build_router(load_aware=False)
    router.set_local_queues([5000.0, 0.0, 0.0, 0.0], now_ms=0.0)
    d = router.choose(PROMPT, *request({0: 2048}), now_ms=0.0)
    assert d.worker == 0 and d.lambda_price == 0.0 and d.explain()[0].queue_ms == 0.0


def test_no_xregion_ablation__remote_match_ignored() -> None:
    router = build_router(cross_region_reuse=False)
    d = router.choose(PROMPT, *request({4: 4096}), now_ms=0.0)
    assert d.worker == 0 and d.remote_holder == -1 and d.claimed_tokens == 0


def test_explain__top_k_sorted_terms_add_up() -> None:
    router = build_router(explain_top_k=4)
    router.set_local_queues([10.0, 20.0, 0.0, 0.0], now_ms=0.0)
    d = router.choose(PROMPT, *request({0: 1024, 4: 2048}, dram=(4,)), now_ms=0.0)
    terms = d.explain()
    assert len(terms) == 4 and terms[0].worker == d.worker
    keys = [(t.score_ms, t.worker) for t in terms]
    assert keys == sorted(keys)
    for t in terms:
        total = t.wan_ms + t.queue_ms + t.prefill_ms + t.reload_ms
        assert t.score_ms == pytest.approx(total)
    assert [t.worker for t in terms] == d.top_workers.tolist()
    assert terms[0].as_dict()["tier"] in {"NONE", "VRAM", "DRAM"}


def test_ties__go_to_lower_worker_id() -> None:
    router = build_router()
    d = router.choose(PROMPT, *request(), now_ms=0.0)
    assert d.worker == 0 and d.top_workers.tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("matched_fn", "message"),
    [
        (lambda m, t: (m.astype(np.int32), t), "int64"),
        (lambda m, t: (m, t.astype(np.int64)), "uint8"),
        (lambda m, t: (m[:-1], t[:-1]), "shape"),
    ],
)
def test_choose_rejects__bad_dtype_or_shape(matched_fn: object, message: str) -> None:
    router = build_router()
    m, t = request({0: 128})
    bad_m, bad_t = matched_fn(m, t)  # type: ignore[operator]
    with pytest.raises(InvalidInputError, match=message):
        router.choose(PROMPT, bad_m, bad_t, now_ms=0.0)


def test_choose_rejects__bad_values() -> None:
    router = build_router()
    m, t = request({0: 128})
    m[3] = -1
    with pytest.raises(InvalidInputError, match=r"matched_tokens\[3\] = -1"):
        router.choose(PROMPT, m, t, now_ms=0.0)
    m, t = request({2: PROMPT + 16})
    with pytest.raises(InvalidInputError, match="<= prompt_tokens"):
        router.choose(PROMPT, m, t, now_ms=0.0)
    m, t = request({0: 128})
    t[0] = 0
    with pytest.raises(InvalidInputError, match=r"tiers\[0\]"):
        router.choose(PROMPT, m, t, now_ms=0.0)
    m, t = request()
    t[1] = 3
    with pytest.raises(InvalidInputError, match=r"tiers\[1\]"):
        router.choose(PROMPT, m, t, now_ms=0.0)


# --- kernel vs naive twin ---------------------------------------------------------------------


@st.composite
def _problems(draw: st.DrawFn) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = draw(st.integers(1, 24))
    prompt = draw(st.integers(0, 8192))
    unit = st.floats(0.0, 1.0)
    matched = np.array(
        [draw(st.integers(0, prompt)) if draw(st.booleans()) else 0 for _ in range(n)]
    )
    tiers = np.array([draw(st.sampled_from([1, 2])) if m > 0 else 0 for m in matched], np.uint8)
    state = np.zeros((sc.N_STATE_ROWS, n))
    state[sc.ROW_BETA] = [draw(st.floats(0.01, 1.0)) for _ in range(n)]
    state[sc.ROW_BELIEF] = [draw(unit) for _ in range(n)]
    # Coarse grids make exact ties (and their tie-breaking) likely.
    state[sc.ROW_QUEUE] = [draw(st.sampled_from([0.0, 1.0, 50.0, 400.0, 3e4])) for _ in range(n)]
    state[sc.ROW_PENDING] = [draw(st.sampled_from([0.0, 10.0, 200.0])) for _ in range(n)]
    state[sc.ROW_WAN] = [draw(st.sampled_from([0.0, 40.0, 160.0])) for _ in range(n)]
    state[sc.ROW_N1] = [draw(st.sampled_from([16, 400, 1600])) for _ in range(n)]
    state[sc.ROW_LOCAL] = [draw(st.booleans()) for _ in range(n)]
    state[sc.ROW_ORDER] = [draw(st.sampled_from([0.0, 5.0, 9.0])) for _ in range(n)]
    params = np.zeros(sc.N_PARAMS)
    params[sc.P_GAMMA] = draw(st.floats(0.0, 0.05))
    params[sc.P_TAU] = draw(st.floats(1.0, 1000.0))
    params[sc.P_LAMBDA_MAX] = draw(st.floats(0.0, 10.0))
    for p in (sc.P_LOAD, sc.P_XREGION, sc.P_TIER, sc.P_BELIEF, sc.P_HERD, sc.P_FIX_LAMBDA):
        params[p] = float(draw(st.booleans()))
    params[sc.P_LAMBDA] = draw(st.sampled_from([0.0, 0.5, 3.0]))
    return prompt, matched.astype(np.int64), tiers, state, params


@given(problem=_problems(), k=st.integers(1, 5))
@settings(max_examples=200, deadline=None)
def test_kernel_matches_naive_twin(
    problem: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray], k: int
) -> None:
    prompt, matched, tiers, state, params = problem
    n = matched.shape[0]
    scores = np.empty(n)
    terms = np.empty((min(k, n), sc.N_TERMS))
    status, winner, lam, min_q, holder, lost, remote, service, claimed, best = sc._score_kernel(
        prompt, matched, tiers, state, params, scores, terms
    )
    ref = router_joint_score(prompt, matched, tiers, state, params)
    assert status == sc.STATUS_OK
    np.testing.assert_allclose(scores, ref.scores, rtol=1e-12, atol=1e-9)
    assert lam == pytest.approx(ref.lam) and min_q == pytest.approx(ref.min_q)
    assert winner == ref.winner and best == scores[winner]
    assert holder == ref.local_holder and lost == ref.lost_to_load
    assert remote == ref.remote_holder
    assert service == pytest.approx(ref.service_ms) and claimed == ref.claimed
    tie = state[sc.ROW_ORDER]
    order = sorted(range(n), key=lambda r: (ref.scores[r], tie[r], r))[: terms.shape[0]]
    assert terms[:, sc.TERM_WORKER].astype(int).tolist() == order


@given(problem=_problems())
@settings(max_examples=50, deadline=None)
def test_score_workers_wrapper__same_as_kernel(
    problem: tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    prompt, matched, tiers, state, params = problem
    scores, lam, winner = score_workers(prompt, matched, tiers, state, params)
    ref = router_joint_score(prompt, matched, tiers, state, params)
    np.testing.assert_allclose(scores, ref.scores, rtol=1e-12, atol=1e-9)
    assert winner == ref.winner and lam == pytest.approx(ref.lam)


def test_score_workers_rejects__bad_packed_arrays() -> None:
    m, t = request()
    with pytest.raises(InvalidInputError, match="state"):
        score_workers(PROMPT, m, t, np.zeros((3, W)), np.ones(sc.N_PARAMS))
    with pytest.raises(InvalidInputError, match="params"):
        score_workers(PROMPT, m, t, np.zeros((sc.N_STATE_ROWS, W)), np.ones(3))


# --- λ: capped and 1/τ-Lipschitz, so a stale estimate skews one decision by a bounded amount ---

_queues = st.lists(st.floats(0.0, 1e5), min_size=1, max_size=16)


@given(
    q=_queues,
    noise=st.lists(st.floats(-1e4, 1e4), min_size=16, max_size=16),
    tau=st.floats(1.0, 2000.0),
    lam_max=st.floats(0.0, 16.0),
)
@settings(max_examples=200, deadline=None)
def test_lambda__capped_and_lipschitz_in_estimates(
    q: list[float], noise: list[float], tau: float, lam_max: float
) -> None:
    a = np.array(q)
    b = np.maximum(0.0, a + np.array(noise[: a.size]))
    la, lb = capacity_price(a, tau, lam_max), capacity_price(b, tau, lam_max)
    assert 0.0 <= la <= lam_max and 0.0 <= lb <= lam_max
    assert abs(la - lb) <= np.max(np.abs(a - b)) / tau + 1e-9


@given(
    stale=st.floats(0.0, 1e5),
    fresh=st.floats(0.0, 1e5),
    others=st.floats(0.0, 1e5),
)
@settings(max_examples=100, deadline=None)
def test_stale_estimate__moves_each_score_by_a_bounded_amount(
    stale: float, fresh: float, others: float
) -> None:
    """One wrong estimate shifts λ by <= |error|/τ, so any score by <= |error|·(1 + β·L/τ)."""
    matched, tiers = request({0: 1024, 4: 2048})
    scores = []
    lams = []
    for q0 in (stale, fresh):
        router = build_router()
        router.on_broadcast(1, [4, 5, 6, 7], [others] * 4, now_ms=0.0)
        router.on_broadcast(2, [8, 9], [others] * 2, now_ms=0.0)
        router.set_local_queues([q0, others, others, others], now_ms=0.0)
        d = router.choose(PROMPT, matched, tiers, now_ms=0.0)
        lams.append(d.lambda_price)
        state = router.state_view()
        s, _, _ = score_workers(PROMPT, matched, tiers, np.array(state), _params_of(router))
        scores.append(s)
    err = abs(stale - fresh)
    tau = build_router().tau_ms
    assert abs(lams[0] - lams[1]) <= err / tau + 1e-9
    bound = err * (1 + BETA * PROMPT / tau) + 1e-6
    assert np.all(np.abs(scores[0] - scores[1]) <= bound)


def _params_of(router: object) -> np.ndarray:
    return np.array(router._params)  # type: ignore[attr-defined]
