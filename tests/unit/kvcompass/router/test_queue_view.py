"""Queue view: live local readings, EWMA remote vectors, staleness, suppression, herding guard."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.router import BroadcastSchedule, QueueView, RouterConfig, broadcast_targets
from kvcompass.router.queue_view import _refresh_kernel
from tests import naive

from .conftest import PROMPT, WORKER_REGION, build_router, request


def _view(**overrides: object) -> QueueView:
    return QueueView(WORKER_REGION, 0, 3, RouterConfig(**overrides))  # type: ignore[arg-type]


def test_local_reading__replaces_estimate() -> None:
    view = _view()
    view.set_local(np.array([5.0, 6.0, 7.0, 8.0]), now_ms=10.0)
    view.set_local(np.array([1.0, 0.0, 0.0, 2.0]), now_ms=20.0)
    assert view.queue_ms[:4].tolist() == [1.0, 0.0, 0.0, 2.0]
    assert view.local_workers.tolist() == [0, 1, 2, 3]


def test_remote_vector__first_sample_taken_then_ewma_with_weight_w() -> None:
    view = _view(queue_ewma_weight=0.5)
    ids = np.array([4, 5], np.int64)
    view.on_vector(1, ids, np.array([100.0, 40.0]), now_ms=0.0)
    assert view.queue_ms[[4, 5]].tolist() == [100.0, 40.0]
    view.on_vector(1, ids, np.array([0.0, 80.0]), now_ms=50.0)
    assert view.queue_ms[[4, 5]].tolist() == [50.0, 60.0]
    view.on_vector(1, np.array([4], np.int64), np.array([10.0]), now_ms=60.0)
    assert view.queue_ms[4] == 30.0 and view.queue_ms[5] == 60.0


def test_vector_of_own_region__is_live() -> None:
    view = _view()
    view.on_vector(0, np.array([1], np.int64), np.array([100.0]), now_ms=0.0)
    view.on_vector(0, np.array([1], np.int64), np.array([4.0]), now_ms=1.0)
    assert view.queue_ms[1] == 4.0


def test_staleness__per_worker_and_region() -> None:
    view = _view()
    assert np.all(np.isinf(view.staleness_ms(0.0)))
    view.set_local(np.zeros(4), now_ms=100.0)
    view.on_vector(1, np.array([4, 5], np.int64), np.zeros(2), now_ms=150.0)
    stale = view.staleness_ms(200.0)
    assert stale[:4].tolist() == [100.0] * 4
    assert stale[4:6].tolist() == [50.0, 50.0] and np.isinf(stale[6])
    regions = view.region_staleness_ms(200.0)
    assert regions[0] == 100.0 and regions[1] == 50.0 and np.isinf(regions[2])


def test_vector_rejects__workers_of_another_region_and_bad_values() -> None:
    view = _view()
    with pytest.raises(InvalidInputError, match="region 1"):
        view.on_vector(1, np.array([4, 8], np.int64), np.zeros(2), now_ms=0.0)
    with pytest.raises(InvalidInputError, match="finite, >= 0"):
        view.on_vector(1, np.array([4], np.int64), np.array([-1.0]), now_ms=0.0)
    with pytest.raises(InvalidInputError, match="finite, >= 0"):
        view.set_local(np.array([0.0, np.nan, 0.0, 0.0]), now_ms=0.0)
    with pytest.raises(InvalidInputError, match="shape"):
        view.set_local(np.zeros(3), now_ms=0.0)
    with pytest.raises(InvalidInputError, match="region in"):
        view.on_vector(3, np.array([], np.int64), np.zeros(0), now_ms=0.0)
    assert np.all(view.queue_ms == 0.0)


def test_vector_rejects__an_absurd_value_and_a_reading_time_far_ahead() -> None:
    """One record with a huge value or a clock far ahead must not pin a region (issue 26)."""
    view = _view(broadcast_period_ms=100.0)
    with pytest.raises(InvalidInputError, match=r"<= 8\.64e"):
        view.on_vector(1, np.array([4], np.int64), np.array([5e11]), now_ms=0.0)
    with pytest.raises(InvalidInputError, match="more than 100 ms after"):
        view.on_vector(1, np.array([4], np.int64), np.array([1.0]), now_ms=0.0, taken_ms=2.0**62)
    view.on_vector(1, np.array([4], np.int64), np.array([7.0]), now_ms=0.0, taken_ms=99.0)
    assert view.queue_ms[4] == 7.0  # a few ms of skew is normal


def test_stale_region__forgotten_after_ten_periods_and_heard_again() -> None:
    view = _view(broadcast_period_ms=100.0)
    view.set_local(np.full(4, 3.0), now_ms=0.0)
    view.on_vector(1, np.array([4, 5], np.int64), np.array([9e6, 40.0]), now_ms=0.0)
    view.on_vector(2, np.array([8], np.int64), np.array([20.0]), now_ms=950.0)
    assert view.expire_stale(999.0) == []  # region 1 is 999 ms old: within 10 periods
    assert view.expire_stale(1001.0) == [1]
    assert view.queue_ms[[4, 5]].tolist() == [0.0, 0.0] and np.isinf(view.staleness_ms(1001.0)[4])
    assert view.queue_ms[8] == 20.0 and view.queue_ms[:4].tolist() == [3.0] * 4  # others kept
    view.on_vector(1, np.array([4], np.int64), np.array([12.0]), now_ms=1100.0)
    assert view.queue_ms[4] == 12.0  # a first sample again (no EWMA with the forgotten one)


# --- broadcast suppression ---------------------------------------------------------------------


def test_broadcast__suppressed_toward_region_piggybacked_within_the_period() -> None:
    last = np.array([-np.inf, 950.0, 900.0, -np.inf])
    # own region 0; region 1 got a piggyback 50 ms ago (suppressed); region 2 exactly one
    # period ago (sent); region 3 never (sent).
    assert broadcast_targets(0, last, now_ms=1000.0, period_ms=100.0).tolist() == [2, 3]


def test_broadcast_schedule__tracks_piggybacks() -> None:
    sched = BroadcastSchedule(own_region=1, n_regions=3, period_ms=100.0)
    assert sched.targets(0.0).tolist() == [0, 2]
    sched.note_piggyback(2, now_ms=10.0)
    assert sched.targets(100.0).tolist() == [0]
    assert sched.targets(110.0).tolist() == [0, 2]


@given(
    last=st.lists(st.one_of(st.just(-np.inf), st.floats(0.0, 2000.0)), min_size=1, max_size=12),
    own=st.integers(0, 11),
    now=st.floats(0.0, 2000.0),
    period=st.floats(1.0, 500.0),
)
@settings(max_examples=200, deadline=None)
def test_broadcast_targets__are_exactly_the_unsuppressed_other_regions(
    last: list[float], own: int, now: float, period: float
) -> None:
    own %= len(last)
    got = broadcast_targets(own, np.array(last), now, period).tolist()
    want = [r for r, t in enumerate(last) if r != own and not (now - t < period)]
    assert got == want


# --- herding guard and idleness ------------------------------------------------------------------


def test_on_forward__adds_pending_until_refresh() -> None:
    view = _view()
    view.on_forward(2, 300.0, now_ms=0.0)
    view.on_forward(2, 100.0, now_ms=1.0)
    assert view.pending_ms[2] == 400.0
    view.set_local(np.zeros(4), now_ms=5.0)
    assert view.pending_ms[2] == 0.0


def test_herding_guard__spreads_a_burst_over_idle_workers() -> None:
    for guard, expect_spread in ((True, True), (False, False)):
        router = build_router(herding_guard=guard)
        router.set_local_queues([0.0] * 4, now_ms=0.0)
        chosen = []
        for i in range(4):
            d = router.choose(PROMPT, *request(), now_ms=float(i))
            router.on_forward(d, now_ms=float(i))
            chosen.append(d.worker)
        assert (len(set(chosen)) == 4) is expect_spread
        if guard:
            assert d.explain()[0].queue_ms == 0.0  # the last idle one, nothing pending yet
        else:
            assert chosen == [0, 0, 0, 0]


def test_persistently_idle__needs_the_configured_time_at_zero() -> None:
    view = _view(migration_idle_min_ms=500.0)
    view.set_local(np.array([0.0, 3.0, 0.0, 0.0]), now_ms=0.0)
    view.set_local(np.array([0.0, 0.0, 0.0, 0.2]), now_ms=300.0)
    assert not view.persistently_idle(499.0)[:4].any()
    idle = view.persistently_idle(500.0)[:4].tolist()
    assert idle == [True, False, True, True]  # 0.2 ms <= eps 0.5 counts as zero
    view.on_forward(2, 50.0, now_ms=600.0)
    assert view.persistently_idle(800.0)[:4].tolist() == [True, True, False, True]


@settings(max_examples=80, deadline=None)
@given(
    data=st.data(),
    ewma=st.booleans(),
    weight=st.floats(0.01, 1.0),
    steps=st.integers(1, 6),
)
def test_refresh_kernel__matches_the_numpy_twin(
    data: st.DataObject, ewma: bool, weight: float, steps: int
) -> None:
    n = 6
    region = np.zeros(n, np.int64)
    arrays = (np.zeros(n), np.full(n, 3.0), np.full(n, -np.inf), np.full(n, np.inf))
    twin = tuple(a.copy() for a in arrays)
    for step in range(steps):
        ids = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=8)), np.int64)
        values = np.array(
            data.draw(
                st.lists(
                    st.sampled_from([0.0, 0.05, 0.1, 2.5, 40.0, 1e6]),
                    min_size=ids.size,
                    max_size=ids.size,
                )
            ),
            np.float64,
        )
        now = 10.0 * step
        status = _refresh_kernel(*arrays, region, ids, values, now, 0, ewma, weight, 0.1)
        naive.queue_view_refresh(twin, ids, values, now, ewma=ewma, weight=weight, eps=0.1)
        assert status == 0
        for got, want in zip(arrays, twin, strict=True):
            np.testing.assert_array_equal(got, want)


def test_refresh_kernel__writes_nothing_when_a_check_fails() -> None:
    region = np.array([0, 0, 1], np.int64)
    arrays = (np.ones(3), np.ones(3), np.ones(3), np.ones(3))
    bad_inputs = [
        (np.array([0, 1]), np.array([1.0, np.nan]), -1),
        (np.array([0, 3]), np.array([1.0, 2.0]), -1),
        (np.array([0, 2]), np.array([1.0, 2.0]), 0),
        (np.array([1]), np.array([-1.0]), 0),
    ]
    for ids, values, reg in bad_inputs:
        status = _refresh_kernel(*arrays, region, ids, values, 5.0, reg, True, 0.5, 0.1)
        assert status == 1
        for a in arrays:
            np.testing.assert_array_equal(a, np.ones(3))
