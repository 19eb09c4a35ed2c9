"""Router wiring: construction, feedback paths, and choose() against the naive twin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.deployment import builtin_deployment
from kvcompass.errors import InvalidInputError
from kvcompass.levels import Levels
from kvcompass.router import Router, RouterConfig
from kvcompass.router import score as sc
from tests.naive import router_joint_score

from .conftest import BETA, N1, PROMPT, RTT, WORKER_REGION, W, build_router, request


def test_from_deployment__wan_n1_beta_rows() -> None:
    dep = builtin_deployment("paper-testbed-14x3")
    levels = Levels.from_deployment(dep)
    origin = 1
    router = Router.from_deployment(dep, levels, origin)
    state = router.state_view()
    for w, r in enumerate(dep.worker_region.tolist()):
        expect_wan = 0.0 if r == origin else dep.rtt_ms(origin, r)
        assert state[sc.ROW_WAN, w] == pytest.approx(expect_wan)
        assert state[sc.ROW_N1, w] == levels.n1(origin, r)
        assert state[sc.ROW_BETA, w] == dep.regions[r].prefill_ms_per_token
        assert bool(state[sc.ROW_LOCAL, w]) == (r == origin)
    assert router.n_workers == dep.n_workers and router.n_regions == dep.n_regions


def test_wan__is_zero_in_region_and_rtt_elsewhere() -> None:
    state = build_router().state_view()
    assert state[sc.ROW_WAN].tolist() == [0.0] * 4 + [80.0] * 4 + [200.0] * 2
    assert state[sc.ROW_N1].tolist() == [128] * 4 + [800] * 4 + [2000] * 2
    with pytest.raises(ValueError, match="read-only"):
        state[0, 0] = 1.0


def test_on_response__updates_belief_and_folds_piggybacked_vector() -> None:
    router = build_router(belief_ewma_weight=0.5)
    router.on_response(4, 2048, 1024, now_ms=5.0, queue_vector=(1, [4, 5, 6, 7], [8.0] * 4))
    assert router.belief.belief[4] == pytest.approx(0.75)
    assert router.queue_view.queue_ms[4:8].tolist() == [8.0] * 4
    assert router.queue_view.staleness_ms(6.0)[4] == 1.0


def test_piggybacked_queue__steers_next_decision_away() -> None:
    router = build_router()
    matched, tiers = request({4: 2048})
    assert router.choose(PROMPT, matched, tiers, now_ms=0.0).worker == 4
    router.on_response(4, 2048, 2048, now_ms=1.0, queue_vector=(1, [4], [2000.0]))
    assert router.choose(PROMPT, matched, tiers, now_ms=2.0).worker == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"origin": 3}, "origin"),
        ({"worker_region": np.array([0, 5], np.int64)}, "worker_region values"),
        ({"beta_ms_per_token": np.zeros(W)}, "beta_ms_per_token"),
        ({"rtt_ms": np.zeros((3, 2))}, "rtt_ms"),
        ({"rtt_ms": -np.ones((3, 3))}, "rtt_ms finite >= 0"),
        ({"n1_tokens": np.zeros((2, 2), np.int64)}, "n1_tokens"),
        ({"worker_region": np.zeros(0, np.int64)}, "W >= 1"),
    ],
)
def test_constructor_rejects__inconsistent_arrays(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {
        "origin": 0,
        "worker_region": WORKER_REGION,
        "beta_ms_per_token": np.full(W, BETA),
        "rtt_ms": RTT,
        "n1_tokens": N1,
    }
    args.update(kwargs)
    if "worker_region" in kwargs and "beta_ms_per_token" not in kwargs:
        args["beta_ms_per_token"] = np.full(len(kwargs["worker_region"]), BETA)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=message):
        Router(**args)  # type: ignore[arg-type]


_event = st.one_of(
    st.tuples(st.just("local"), st.lists(st.floats(0.0, 3000.0), min_size=4, max_size=4)),
    st.tuples(st.just("bcast1"), st.lists(st.floats(0.0, 3000.0), min_size=4, max_size=4)),
    st.tuples(st.just("bcast2"), st.lists(st.floats(0.0, 3000.0), min_size=2, max_size=2)),
    st.tuples(
        st.just("resp"),
        st.tuples(st.integers(0, W - 1), st.integers(0, 4096), st.integers(0, 4096)),
    ),
    st.tuples(st.just("req"), st.lists(st.integers(0, PROMPT), min_size=W, max_size=W)),
)


@given(
    events=st.lists(_event, min_size=1, max_size=25),
    herding=st.booleans(),
    load_aware=st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_choose__matches_naive_twin_after_any_feedback(
    events: list[tuple[str, object]], herding: bool, load_aware: bool
) -> None:
    router = build_router(herding_guard=herding, load_aware=load_aware)
    params = np.array(router._params)  # the packed parameters the kernel reads
    for now, (kind, payload) in enumerate(events):
        if kind == "local":
            router.set_local_queues(payload, float(now))  # type: ignore[arg-type]
        elif kind == "bcast1":
            router.on_broadcast(1, [4, 5, 6, 7], payload, float(now))  # type: ignore[arg-type]
        elif kind == "bcast2":
            router.on_broadcast(2, [8, 9], payload, float(now))  # type: ignore[arg-type]
        elif kind == "resp":
            resp: tuple[int, int, int] = payload  # type: ignore[assignment]
            router.on_response(resp[0], resp[1], resp[2], float(now))
        else:
            matched = np.array(payload, np.int64)
            matched[::3] = 0
            tiers = np.where(matched > 0, 1 + (np.arange(W) % 2), 0).astype(np.uint8)
            ref = router_joint_score(PROMPT, matched, tiers, np.array(router.state_view()), params)
            d = router.choose(PROMPT, matched, tiers, float(now))
            assert d.worker == ref.winner
            assert d.score_ms == pytest.approx(ref.scores[d.worker])
            assert d.lambda_price == pytest.approx(ref.lam)
            router.on_forward(d, float(now))


def test_router_config__defaults_used_when_none() -> None:
    router = Router(0, WORKER_REGION, np.full(W, BETA), RTT, N1)
    assert router.config == RouterConfig()


@given(
    stale=st.lists(st.floats(0.0, 1e4), min_size=4, max_size=4),
    fresh=st.lists(st.floats(0.0, 1e4), min_size=4, max_size=4),
    matches=st.lists(st.integers(0, PROMPT), min_size=W, max_size=W),
)
@settings(max_examples=60, deadline=None)
def test_stale_local_reading__leaves_no_trace_after_refresh(
    stale: list[float], fresh: list[float], matches: list[int]
) -> None:
    matched = np.array(matches, np.int64)
    tiers = np.where(matched > 0, 1, 0).astype(np.uint8)
    skewed, clean = build_router(), build_router()
    skewed.set_local_queues(stale, now_ms=0.0)
    skewed.choose(PROMPT, matched, tiers, now_ms=0.0)  # the one decision the stale view skews
    skewed.set_local_queues(fresh, now_ms=1.0)
    clean.set_local_queues(fresh, now_ms=1.0)
    a = skewed.choose(PROMPT, matched, tiers, now_ms=2.0)
    b = clean.choose(PROMPT, matched, tiers, now_ms=2.0)
    assert (a.worker, a.score_ms, a.lambda_price) == (b.worker, b.score_ms, b.lambda_price)


@given(stale=st.floats(0.0, 1e4), fresh=st.floats(0.0, 1e4), n=st.integers(1, 8))
@settings(max_examples=60, deadline=None)
def test_stale_remote_estimate__decays_geometrically_with_refreshes(
    stale: float, fresh: float, n: int
) -> None:
    router = build_router(queue_ewma_weight=0.5)
    router.on_broadcast(2, [8, 9], [stale, stale], now_ms=0.0)
    for i in range(n):
        router.on_broadcast(2, [8, 9], [fresh, fresh], now_ms=100.0 * (i + 1))
    err = router.queue_view.queue_ms[8] - fresh
    assert abs(err) == pytest.approx(abs(stale - fresh) * 0.5**n, abs=1e-9)


def test_unroutable_workers_never_win__while_a_routable_one_exists() -> None:
    router = build_router()
    matched, tiers = request({4: 2048})
    assert router.choose(PROMPT, matched, tiers, now_ms=0.0).worker == 4
    router.set_unroutable([w for w in range(W) if w != 9])
    d = router.choose(PROMPT, matched, tiers, now_ms=1.0)
    assert d.worker == 9 and d.top_workers.tolist()[0] == 9
    router.set_unroutable([])  # replaced, not added to
    assert router.choose(PROMPT, matched, tiers, now_ms=2.0).worker == 4
    assert router.state_view()[sc.ROW_WAN].tolist() == [0.0] * 4 + [80.0] * 4 + [200.0] * 2
    with pytest.raises(InvalidInputError, match="unroutable worker"):
        router.set_unroutable([W])
