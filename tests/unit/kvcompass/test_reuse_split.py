"""The routing-visibility split (kvcompass.reuse_split): each kind on a hand-built case."""

from __future__ import annotations

import numpy as np

from kvcompass.reuse_split import (
    FAMILY_BUCKETS,
    REUSE_KINDS,
    ReuseTally,
    at_answer,
    at_decision,
    family_bucket,
)

REGION = np.array([0, 0, 1, 1], np.int64)


def test_a_remote_holder_passed_over__forgone_for_the_wan() -> None:
    m = np.array([0, 256, 4096, 0], np.int64)
    got = at_decision(m, REGION, chosen=1, captured=256)
    assert (got.reusable, got.captured, got.forgone_wan) == (4096, 256, 3840)


def test_the_holder_chosen_or_a_nearer_shorter_one_in_its_region__nothing_forgone() -> None:
    m = np.array([0, 256, 4096, 1024], np.int64)
    assert at_decision(m, REGION, chosen=2, captured=4096).forgone_wan == 0
    assert at_decision(m, REGION, chosen=3, captured=1024).forgone_wan == 0  # same region


def test_lost_stale_is_claimed_minus_delivered__never_negative() -> None:
    assert at_answer(1024, 256) == 768
    assert at_answer(256, 1024) == 0


def test_tally_sums_every_kind__and_buckets_cover_the_range() -> None:
    t = ReuseTally()
    t.decided(at_decision(np.array([0, 64, 512, 0], np.int64), REGION, 0, 0))
    t.answered(0, 0)
    t.decided(at_decision(np.array([0, 64, 0, 0], np.int64), REGION, 1, 64))
    t.answered(64, 48)
    assert set(t.tokens) == set(REUSE_KINDS)
    assert t.tokens == {"reusable": 576, "captured": 64, "forgone_wan": 512, "delivered": 48,
                        "lost_stale": 16}  # fmt: skip
    assert {family_bucket(k) for k in range(100)} == set(range(FAMILY_BUCKETS))
