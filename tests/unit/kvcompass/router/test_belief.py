"""Cache belief: EWMA of reused/claimed, clamped, with a prior and a defined claim-0 case."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.router import CacheBelief


def test_new_worker__starts_at_prior() -> None:
    assert CacheBelief(3, weight=0.2, prior=1.0).belief.tolist() == [1.0, 1.0, 1.0]
    assert CacheBelief(2, weight=0.2, prior=0.5).belief.tolist() == [0.5, 0.5]


def test_update__is_ewma_of_reused_over_claimed() -> None:
    b = CacheBelief(2, weight=0.25, prior=1.0)
    assert b.update(0, claimed_tokens=1000, reused_tokens=0) == pytest.approx(0.75)
    assert b.update(0, claimed_tokens=1000, reused_tokens=500) == pytest.approx(0.6875)
    assert b.belief[1] == 1.0


def test_update__ratio_clamped_to_one_when_worker_reused_more() -> None:
    b = CacheBelief(1, weight=0.5, prior=0.5)
    assert b.update(0, claimed_tokens=100, reused_tokens=400) == pytest.approx(0.75)


def test_update__claim_zero_leaves_belief_unchanged() -> None:
    b = CacheBelief(1, weight=0.5, prior=0.6)
    assert b.update(0, claimed_tokens=0, reused_tokens=300) == pytest.approx(0.6)
    assert b.n_updates[0] == 0


def test_update__rejects_bad_input() -> None:
    b = CacheBelief(2, weight=0.5, prior=1.0)
    with pytest.raises(InvalidInputError, match="worker"):
        b.update(2, 10, 10)
    with pytest.raises(InvalidInputError, match="reused_tokens >= 0"):
        b.update(0, 10, -1)
    with pytest.raises(InvalidInputError, match="weight"):
        CacheBelief(2, weight=0.0, prior=1.0)


@given(
    weight=st.floats(0.01, 1.0),
    prior=st.floats(0.0, 1.0),
    events=st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 5000)), max_size=40),
)
@settings(max_examples=100, deadline=None)
def test_belief__stays_in_unit_interval(
    weight: float, prior: float, events: list[tuple[int, int]]
) -> None:
    b = CacheBelief(1, weight=weight, prior=prior)
    for claimed, reused in events:
        value = b.update(0, claimed, reused)
        assert 0.0 <= value <= 1.0
