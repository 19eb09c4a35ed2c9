"""The one decider of an edge: what it decides from the events a real edge sees."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kvcompass.decider import Decider, QueueVector
from kvcompass.router import score as sc
from tests.unit.kvcompass.decider.conftest import (
    BETA,
    HOP,
    deciders,
    one_region,
    prompt,
    two_regions,
)


def _send(d: Decider, fid: int, tokens: np.ndarray, now: float) -> int:
    plan = d.decide(fid, d.lookup(tokens), len(tokens), now)
    d.dispatch(plan, now)
    return plan.worker


def _queue_term(d: Decider, fid: int, tokens: np.ndarray, worker: int, now: float) -> float:
    plan = d.decide(fid, d.lookup(tokens), len(tokens), now)
    rows = plan.decision.top_terms
    return float(rows[rows[:, sc.TERM_WORKER] == worker][0, sc.TERM_QUEUE])


# -- the back-to-back case of issue 25 --------------------------------------------------------


@pytest.mark.parametrize("pair", range(20))
def test_back_to_back__b_reuses_as_prefix_right_after_its_first_token(pair: int) -> None:
    """Prompt B = prompt A + 3 tokens, sent right after A's response, reaches A's worker with
    A's prefix claimed: the first token retired A's work and confirmed its prefix as held,
    although no load poll and no index patch came in between (issue 25: 13 of 20 went to the
    other worker with 0 cached tokens)."""
    [d] = deciders(one_region(2))
    rng = np.random.default_rng(pair)
    a = prompt(int(rng.integers(1100, 4000)), seed=pair)
    b = np.concatenate([a, np.array([7, 8, 9], np.int32)])
    # A stale poll: taken while A was still waiting, it charges A's whole prefill to its worker.
    w = _send(d, 1, a, 0.0)
    stale = np.zeros(2)
    stale[w] = len(a) * BETA
    d.on_local_loads(np.array([0, 1]), stale, 1.0, 2.0)
    first_token = HOP + len(a) * BETA * float(rng.uniform(0.5, 1.0)) + HOP
    d.on_first_token(1, w, first_token, reused_tokens=0)
    plan = d.decide(2, d.lookup(b), len(b), first_token + 0.1)
    assert plan.worker == w
    assert plan.decision.claimed_tokens >= 1024
    assert _queue_term(d, 3, b, w, first_token + 0.1) == 0.0


def test_back_to_back__without_the_first_token_the_worker_still_looks_busy() -> None:
    """The control: the same stale state without the first token charges A's worker (what the
    test above rules out)."""
    [d] = deciders(one_region(2))
    a = prompt(3000)
    w = _send(d, 1, a, 0.0)
    stale = np.zeros(2)
    stale[w] = len(a) * BETA
    d.on_local_loads(np.array([0, 1]), stale, 1.0, 2.0)
    assert _queue_term(d, 2, a, w, 150.0) > 100.0


# -- route-and-reserve ------------------------------------------------------------------------


def _busy(d: Decider, workers: list[int], ms: float, now: float) -> None:
    """Book ``ms`` of unrelated local work on each of ``workers`` at ``d``'s edge."""
    for w in workers:
        lk = d.lookup(prompt(200, seed=900 + w))
        plan = d.decide(10_000 + w, lk, 200, now)
        plan = plan._replace(worker=w, decision=plan.decision._replace(worker=w))
        plan = plan._replace(decision=plan.decision._replace(predicted_service_ms=ms))
        d.dispatch(plan, now)


def test_relay__remote_winner_goes_to_its_owning_edge_with_a_shortlist() -> None:
    a, b = deciders(two_regions())
    _busy(a, [0, 1], 5000.0, 0.0)
    tokens = prompt(2000)
    plan = a.decide(1, a.lookup(tokens), len(tokens), 1.0)
    assert plan.relay_region == 1 and plan.worker in (2, 3)
    sl = plan.shortlist
    assert sl is not None and set(sl.workers) == {2, 3} and not sl.final
    assert sl.alternative_ms == pytest.approx(float(a.router.scores[[0, 1]].min()))
    verdict = b.on_relay(1, sl, b.lookup(tokens), 51.0)
    assert verdict.plan is not None and verdict.plan.worker in (2, 3)
    b.dispatch(verdict.plan, 51.0)
    assert b.booking is not None and len(b.booking) == 1  # the owning edge booked its pick


def test_relay__refused_when_the_owner_is_busier_than_the_alternative_then_final() -> None:
    a, b = deciders(two_regions())
    _busy(a, [0, 1], 400.0, 0.0)  # a looks worse than b from a's (stale) view of b
    _busy(b, [2, 3], 5000.0, 0.0)  # but b is booked solid: only b's edge knows it now
    tokens = prompt(2000)
    plan = a.decide(1, a.lookup(tokens), len(tokens), 1.0)
    a.dispatch(plan, 1.0)
    assert plan.relay_region == 1 and plan.shortlist is not None
    verdict = b.on_relay(1, plan.shortlist, b.lookup(tokens), 51.0)
    assert verdict.plan is None and verdict.vector is not None
    assert verdict.vector.queue_ms.min() > 4000.0
    final = a.on_refused(1, verdict.vector, len(tokens), 101.0)
    assert final.relay_region == -1 and final.worker in (0, 1)  # home, with b's truth in hand
    a.dispatch(final, 101.0)


def test_relay__threshold_is_the_alternative_score_no_constant() -> None:
    """The owner accepts iff its best score (WAN aside) <= the origin's alternative: accepting
    costs RTT + that score, refusing costs the refusal's RTT + the alternative."""
    a, b = deciders(two_regions())
    _busy(a, [0, 1], 5000.0, 0.0)
    _busy(b, [2, 3], 700.0, 0.0)
    tokens = prompt(2000)
    sl = a.decide(1, a.lookup(tokens), len(tokens), 1.0).shortlist
    assert sl is not None
    forced = b.on_relay(1, replace(sl, final=True), b.lookup(tokens), 51.0)
    assert forced.plan is not None
    score = forced.plan.decision.score_ms
    assert score > 700.0 - 51.0  # b's booked queue is in it
    for alt, accepted in ((score, True), (score - 1e-6, False)):
        v = b.on_relay(2, replace(sl, alternative_ms=alt), b.lookup(tokens), 51.0)
        assert (v.plan is not None) is accepted


def test_relay__a_final_relay_is_always_accepted() -> None:
    a, b = deciders(two_regions())
    _busy(a, [0, 1], 5000.0, 0.0)
    _busy(b, [2, 3], 9000.0, 0.0)
    tokens = prompt(2000)
    plan = a.decide(1, a.lookup(tokens), len(tokens), 1.0, final=True)
    assert plan.shortlist is not None and plan.shortlist.final
    assert b.on_relay(1, plan.shortlist, b.lookup(tokens), 51.0).plan is not None


# -- feedback, overlay, vectors ---------------------------------------------------------------


def test_first_token__confirms_the_prefix_at_the_worker_that_served_it() -> None:
    a, _ = deciders(two_regions())
    _busy(a, [0, 1], 5000.0, 0.0)
    tokens = prompt(3000)
    plan = a.decide(1, a.lookup(tokens), len(tokens), 1.0)
    a.dispatch(plan, 1.0)
    other = 5 - plan.worker  # the owning edge picked the other worker of b
    a.on_first_token(1, other, 400.0, reused_tokens=0)
    again = a.decide(2, a.lookup(tokens), len(tokens), 401.0)
    m = again.decision
    claimed = {int(r[sc.TERM_WORKER]): int(r[sc.TERM_MATCHED]) for r in m.top_terms}
    assert claimed.get(other, 0) >= 2048
    assert claimed.get(plan.worker, 0) == 0  # the guess was released


def test_undispatch__releases_the_booking_and_the_hold() -> None:
    [d] = deciders(one_region(2))
    tokens = prompt(2000)
    plan = d.decide(1, d.lookup(tokens), len(tokens), 0.0)
    d.dispatch(plan, 0.0)
    d.undispatch(1, 1.0)
    assert d.booking is not None and len(d.booking) == 0
    again = d.decide(2, d.lookup(tokens), len(tokens), 2.0)
    assert again.decision.claimed_tokens == 0


def test_broadcast__suppressed_toward_a_region_that_just_got_a_piggyback() -> None:
    a, _ = deciders(two_regions())
    period = a.config.broadcast_period_ms
    assert [dest for dest, v in a.broadcast(0.0) if v.worker_ids.size] == [1]
    assert a.piggyback(1, 10.0) is not None
    assert [dest for dest, v in a.broadcast(10.0 + period / 2) if v.worker_ids.size] == []
    assert [dest for dest, v in a.broadcast(10.0 + period) if v.worker_ids.size] == [1]


def test_vector__carries_the_booked_backlog_and_the_forwards_in_flight() -> None:
    a, b = deciders(two_regions())
    _busy(a, [0, 1], 300.0, 0.0)
    tokens = prompt(2000)
    plan = a.decide(1, a.lookup(tokens), len(tokens), 1.0)
    a.dispatch(plan, 1.0)
    vec = a.vector(2.0)
    assert vec is not None and vec.region == 0 and vec.taken_ms == 2.0
    assert vec.worker_ids.tolist() == [0, 1]
    assert vec.queue_ms.tolist() == pytest.approx([300.0 + HOP - 2.0] * 2)
    if plan.relay_region >= 0:
        assert [w for w, _, _ in vec.in_flight] == [plan.worker]
    b.on_vector(vec, 60.0)
    assert b.router.queue_view.queue_ms[[0, 1]].tolist() == pytest.approx(vec.queue_ms.tolist())


def test_vector_wire_bytes__avro_sizes() -> None:
    empty = QueueVector(0, 0.0, np.zeros(0, np.int64), np.zeros(0))
    # framing 5 + region 1 + two empty arrays 2 + seq/timestamp 12 + v2 arrays 2 + v3 arrays 3
    assert empty.wire_bytes() == 25
    eight = QueueVector(3, 0.0, np.arange(8, dtype=np.int64), np.zeros(8))
    assert eight.wire_bytes() == 25 + (1 + 8) + (1 + 32)
    flying = QueueVector(3, 0.0, np.zeros(0, np.int64), np.zeros(0), ((70, 1.0, 2.0),))
    assert flying.wire_bytes() == 25 + (1 + 2) + 2 * (1 + 4)  # worker 70 zig-zags to 2 bytes


def test_retarget__the_edges_retry_takes_that_workers_match_and_work() -> None:
    [d] = deciders(one_region(2))
    tokens = prompt(2000)
    d.dispatch(d.decide(1, d.lookup(tokens), len(tokens), 0.0), 0.0)
    d.on_first_token(1, 0, 201.0, reused_tokens=0)
    plan = d.decide(2, d.lookup(tokens), len(tokens), 202.0)
    assert plan.worker == 0 and plan.decision.claimed_tokens > 0
    other = d.retarget(plan, 1)
    assert other.worker == 1 and other.decision.claimed_tokens == 0
    assert other.decision.predicted_service_ms == pytest.approx(len(tokens) * BETA)
    d.dispatch(other, 202.0)
    assert d.booking is not None and d.booking.open_forwards(1) == 1
