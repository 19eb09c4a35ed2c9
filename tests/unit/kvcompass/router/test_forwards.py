"""The herding guard's forward ledger: pending work is what no reading can include yet."""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.router import QueueView, RouterConfig

REGION = np.array([0, 0, 1, 1], dtype=np.int64)  # workers 0, 1 local to edge 0; 2, 3 remote


def _view(**kw: bool) -> QueueView:
    return QueueView(REGION, origin=0, n_regions=2, config=RouterConfig(**kw))


def test_remote_reading_taken_before_a_forward_landed__keeps_that_forward() -> None:
    qv = _view()
    qv.on_forward(2, 40.0, now_ms=0.0, arrive_ms=100.0)
    qv.on_forward(2, 30.0, now_ms=10.0, arrive_ms=110.0)
    qv.on_vector(1, np.array([2, 3]), np.array([5.0, 0.0]), now_ms=150.0, taken_ms=105.0)
    assert qv.pending_ms[2] == 30.0  # landed at 100 (in the reading), 110 (not yet in it)
    qv.on_vector(1, np.array([2, 3]), np.array([5.0, 0.0]), now_ms=250.0, taken_ms=200.0)
    assert qv.pending_ms[2] == 0.0


def test_without_the_ledger__any_refresh_zeroes_pending_work() -> None:
    qv = _view(inflight_work=False)
    qv.on_forward(2, 40.0, now_ms=0.0, arrive_ms=100.0)
    qv.on_vector(1, np.array([2, 3]), np.array([5.0, 0.0]), now_ms=50.0, taken_ms=10.0)
    assert qv.pending_ms[2] == 0.0
    assert qv.own_in_flight(0.0) == []


def test_peer_forwards__count_until_a_reading_includes_them_and_each_report_replaces() -> None:
    qv = _view()
    qv.on_vector(1, np.array([2, 3]), np.array([0.0, 0.0]), now_ms=50.0, taken_ms=0.0)
    qv.on_peer_in_flight(1, [(3, 120.0, 25.0), (0, 130.0, 10.0)])
    assert (qv.pending_ms[3], qv.pending_ms[0]) == (25.0, 10.0)
    qv.on_peer_in_flight(1, [(3, 140.0, 5.0)])  # the next report from the same edge
    assert (qv.pending_ms[3], qv.pending_ms[0]) == (5.0, 0.0)
    qv.set_local(np.array([0.0, 0.0]), now_ms=160.0, taken_ms=150.0)
    qv.on_vector(1, np.array([2, 3]), np.array([0.0, 7.0]), now_ms=260.0, taken_ms=150.0)
    assert qv.pending_ms[3] == 0.0 and qv.queue_ms[3] > 0.0


def test_own_in_flight__lists_forwards_not_landed() -> None:
    qv = _view()
    qv.on_forward(3, 40.0, now_ms=0.0, arrive_ms=100.0)
    qv.on_forward(1, 9.0, now_ms=0.0, arrive_ms=0.5)
    assert qv.own_in_flight(50.0) == [(3, 100.0, 40.0)]


def test_bad_peer_entry__rejected() -> None:
    qv = _view()
    with pytest.raises(ValueError, match="in-flight"):
        qv.on_peer_in_flight(1, [(9, 1.0, 1.0)])


def test_announced_peer_forward__counts_until_a_reading_includes_it() -> None:
    qv = _view()
    qv.on_vector(1, np.array([2, 3]), np.array([0.0, 0.0]), now_ms=50.0, taken_ms=0.0)
    qv.on_peer_forward(1, 2, arrive_ms=90.0, work_ms=12.0)
    assert qv.pending_ms[2] == 12.0
    qv.on_peer_in_flight(1, [])  # the peer's next list no longer has it: replaced
    assert qv.pending_ms[2] == 0.0
