"""Several seeds: spreads, per-seed ratios and the one win / loss / within-spread rule."""

from __future__ import annotations

import math

import pytest

from sim import spread
from sim.spread import Spread


@pytest.mark.parametrize(
    ("lo", "hi", "lower_is_better", "expected"),
    [
        (1.10, 1.40, True, "win"),  # another scheme's P99 is 10–40% above ours
        (0.70, 0.90, True, "loss"),
        (0.90, 1.30, True, "within spread"),  # the interval holds 1.0
        (1.01, 1.05, True, "within spread"),  # mean within 5%
        (0.70, 0.90, False, "win"),  # throughput: another scheme's is below ours
        (1.10, 1.20, False, "loss"),
    ],
)
def test_verdict__rule(lo: float, hi: float, lower_is_better: bool, expected: str) -> None:
    assert spread.verdict(Spread((lo + hi) / 2, lo, hi, 3), lower_is_better) == expected


def test_verdict__one_seed_and_no_ratio() -> None:
    assert spread.verdict(Spread.of([1.2]), True) == "win"
    assert spread.verdict(Spread.of([1.04]), True) == "within spread"
    assert spread.verdict(Spread.of([math.nan]), True) == "—"


def test_ratio_spread__per_seed_then_spread() -> None:
    seeds = [
        {"kvcompass": {"ttft_p99_ms": 100.0}, "dynamo": {"ttft_p99_ms": 300.0}},
        {"kvcompass": {"ttft_p99_ms": 200.0}, "dynamo": {"ttft_p99_ms": 200.0}},
    ]
    r = spread.ratio_spread(seeds, "dynamo", "ttft_p99_ms", "kvcompass")
    # per seed 3.0 and 1.0 (not the ratio of means, 250/150)
    assert (r.mean, r.lo, r.hi, r.n) == (2.0, 1.0, 3.0, 2)
    assert spread.mean_summaries(seeds)["dynamo"]["ttft_p99_ms"] == 250.0
    assert spread.best_other(seeds, "ttft_p99_ms", "kvcompass") == "dynamo"


def test_spread__leaves_nan_out() -> None:
    sp = Spread.of([1.0, math.nan, 3.0])
    assert (sp.mean, sp.lo, sp.hi, sp.n) == (2.0, 1.0, 3.0, 2)
