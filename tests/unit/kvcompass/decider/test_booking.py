"""RegionBooking: the exact FIFO model of a region's own workers, anchored at first tokens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.decider import RegionBooking
from kvcompass.errors import InvalidInputError

HOP = 0.5


def _booking() -> RegionBooking:
    return RegionBooking(np.array([4, 5], np.int64), HOP)


def test_book__forwards_queue_fifo_behind_each_other() -> None:
    b = _booking()
    assert b.book(1, 4, 0.0, 100.0) == HOP
    b.book(2, 4, 10.0, 50.0)
    # Drain at 0.5 + 100 + 50; a forward sent at 20 lands at 20.5.
    assert b.waits(20.0).tolist() == pytest.approx([150.5 - 20.5, 0.0])
    assert b.backlog(20.0).tolist() == pytest.approx([130.5, 0.0])


def test_first_token__anchors_at_the_real_finish_and_drops_those_ahead() -> None:
    b = _booking()
    b.book(1, 4, 0.0, 100.0)
    b.book(2, 4, 0.0, 100.0)
    b.book(3, 4, 0.0, 100.0)
    # Forward 2 finished early (its first token at 61): 1 and 2 are done, 3 remains.
    assert b.retire(2, 61.0) == 4
    assert b.open_forwards(4) == 1
    assert b.backlog(61.0)[0] == pytest.approx(100.0 - HOP)  # 3 starts at 60.5
    assert b.retire(1, 62.0) == -1  # already dropped: a no-op
    b.retire(3, 200.0)
    assert b.backlog(200.0)[0] == 0.0


def test_cancel__forgets_a_forward_that_never_left() -> None:
    b = _booking()
    b.book(1, 5, 0.0, 80.0)
    assert b.cancel(1) == 5
    assert b.backlog(0.0).tolist() == [0.0, 0.0]
    assert b.cancel(1) == -1


def test_reading__raises_the_estimate_with_work_the_edge_did_not_book() -> None:
    b = _booking()
    b.book(1, 4, 0.0, 100.0)
    b.on_reading(4, 300.0, 10.0)  # a migration's recompute the edge never booked
    assert b.backlog(10.0)[0] == pytest.approx(300.0)
    b.book(2, 4, 20.0, 50.0)  # lands after the reading: added on top
    assert b.backlog(20.0)[0] == pytest.approx(10.0 + 300.0 + 50.0 - 20.0)
    b.on_reading(4, 0.0, 5.0)  # an older reading changes nothing
    assert b.backlog(20.0)[0] == pytest.approx(340.0)


def test_book__refuses_a_foreign_worker_and_a_second_booking() -> None:
    b = _booking()
    with pytest.raises(InvalidInputError, match="worker"):
        b.book(1, 0, 0.0, 1.0)
    b.book(1, 4, 0.0, 1.0)
    with pytest.raises(InvalidInputError, match="already"):
        b.book(1, 5, 0.0, 1.0)


@given(
    works=st.lists(st.floats(1.0, 500.0), min_size=1, max_size=12),
    gaps=st.lists(st.floats(0.0, 300.0), min_size=12, max_size=12),
)
@settings(max_examples=100, deadline=None)
def test_exact_predictions__booked_drain_is_the_fifos(
    works: list[float], gaps: list[float]
) -> None:
    """With exact work predictions, the booking's backlog equals a FIFO simulated by hand, and
    retiring each forward at its real first token never changes the prediction."""
    b = RegionBooking(np.array([0], np.int64), HOP)
    t = 0.0
    free = 0.0
    finishes = []
    for i, (work, gap) in enumerate(zip(works, gaps, strict=False)):
        t += gap
        b.book(i, 0, t, work)
        free = max(free, t + HOP) + work
        finishes.append(free)
        assert b.backlog(t)[0] == pytest.approx(max(free - t, 0.0))
    for i, finish in enumerate(finishes):
        b.retire(i, finish + HOP)
        assert b.backlog(finish)[0] == pytest.approx(free - finish)


def test_forwards_landing_out_of_booking_order__fifo_by_arrival() -> None:
    """A booker whose forwards travel unequal paths (the simulator's central directory, hop 0,
    landing times passed to ``book``): the worker's FIFO is by arrival, so the drain and
    ``retire`` follow arrival order, not booking order."""
    b = RegionBooking(np.array([0], np.int64), 0.0)
    b.book(1, 0, 100.0, 50.0)  # booked first, lands at 100
    b.book(2, 0, 50.0, 30.0)  # booked second, lands first: served 50-80, then 1 at 100-150
    assert b.drain_ms()[0] == pytest.approx(150.0)
    assert b.retire(2, 80.0) == 0
    assert b.open_forwards(0) == 1  # 1 landed after 2: it is still ahead
    assert b.drain_ms()[0] == pytest.approx(150.0)
    assert b.retire(1, 150.0) == 0
    assert b.open_forwards(0) == 0
