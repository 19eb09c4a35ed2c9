"""The herding guard's forward ledger: pending work is what no reading can include yet."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.router import QueueView, RouterConfig
from kvcompass.router.forwards import ForwardLedger

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
    qv = _view(forward_ledger=False)
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


# -- the ledger itself (one implementation for the edge, the directory and the references) ----


def test_ledger__pending_after_one_time_or_one_per_worker() -> None:
    led = ForwardLedger(3)
    led.add(0, 10.0, 5.0)
    led.add(0, 20.0, 7.0)
    led.add(2, 15.0, 1.0, source=4)
    assert led.pending_after(12.0).tolist() == [7.0, 0.0, 1.0]
    assert led.pending_after(np.array([5.0, 0.0, 20.0])).tolist() == [12.0, 0.0, 0.0]
    led.forget_landed(np.array([10.0, 0.0, 0.0]))
    assert len(led) == 2
    assert led.in_flight(0.0) == [(0, 20.0, 7.0)]
    assert led.in_flight(0.0, source=4) == [(2, 15.0, 1.0)]


def test_ledger__remove_and_replace_source() -> None:
    led = ForwardLedger(2)
    led.add(1, 10.0, 5.0)
    assert led.remove(1, 10.0, 5.0) and not led.remove(1, 10.0, 5.0)
    led.add(0, 30.0, 2.0, source=1)
    led.replace_source(1, [(1, 40.0, 3.0)])
    assert led.pending_after(0.0).tolist() == [0.0, 3.0]


@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["add", "forget", "remove", "replace"]),
            st.integers(0, 3),
            st.floats(0.0, 100.0),
            st.floats(0.0, 50.0),
            st.integers(-1, 2),
        ),
        max_size=120,
    ),
    query=st.floats(0.0, 100.0),
)
@settings(max_examples=150, deadline=None)
def test_ledger__matches_a_plain_list(
    ops: list[tuple[str, int, float, float, int]], query: float
) -> None:
    """Every operation against a list of (worker, arrive, work, source), compactions included."""
    led = ForwardLedger(4)
    ref: list[tuple[int, float, float, int]] = []
    for op, w, t, work, src in ops:
        if op == "add":
            led.add(w, t, work, src)
            ref.append((w, t, work, src))
        elif op == "forget":
            led.forget_landed(t)
            ref = [e for e in ref if e[1] > t]
        elif op == "remove":
            hit = next((e for e in ref if e == (w, t, work, -1)), None)
            assert led.remove(w, t, work) == (hit is not None)
            if hit is not None:
                ref.remove(hit)
        else:
            led.replace_source(src, [(w, t, work)])
            ref = [e for e in ref if e[3] != src] + [(w, t, work, src)]
    want = np.zeros(4)
    for w, t, work, _ in ref:
        if t > query:
            want[w] += work
    np.testing.assert_allclose(led.pending_after(query), want, rtol=1e-12, atol=1e-9)
    assert len(led) == len(ref)


@given(seed=st.integers(0, 2**32 - 1), per_worker=st.booleans())
@settings(max_examples=100, deadline=None)
def test_ledger_kernels__equal_the_numpy_form(seed: int, per_worker: bool) -> None:
    """pending_after / forget_landed (one njit pass each) against bincount and masks."""
    rng = np.random.default_rng(seed)
    n_workers = 5
    ledger = ForwardLedger(n_workers)
    entries = []
    for _ in range(int(rng.integers(0, 150))):
        e = (int(rng.integers(0, n_workers)), float(rng.integers(0, 50)), float(rng.random()))
        ledger.add(*e)
        entries.append(e)
        if rng.random() < 0.2 and entries:
            gone = entries.pop(int(rng.integers(0, len(entries))))
            assert ledger.remove(*gone)
    taken = rng.uniform(0, 50, n_workers) if per_worker else float(rng.uniform(0, 50))
    w = np.array([e[0] for e in entries], dtype=np.int64)
    arrive = np.array([e[1] for e in entries])
    work = np.array([e[2] for e in entries])
    t = taken[w] if per_worker else taken  # type: ignore[index]
    want = np.bincount(w[arrive > t], work[arrive > t], minlength=n_workers).astype(np.float64)
    assert ledger.pending_after(taken).tolist() == want.tolist()  # the same sums, bit for bit
    ledger.forget_landed(taken)
    assert len(ledger) == int((arrive > t).sum())
    assert ledger.pending_after(taken).tolist() == want.tolist()


def test_ledger__a_worker_id_outside_the_fleet_keeps_the_numpy_behaviour() -> None:
    ledger = ForwardLedger(2)
    ledger.add(3, 10.0, 4.0)  # add() does not check ids; bincount grows the result
    assert ledger.pending_after(0.0).tolist() == [0.0, 0.0, 0.0, 4.0]
    ledger.forget_landed(20.0)
    assert len(ledger) == 0
