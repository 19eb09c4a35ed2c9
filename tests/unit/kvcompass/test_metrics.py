"""kvcompass.metrics: one definition of every reported figure, checked on hand-computed runs."""

from __future__ import annotations

import math

import numpy as np

from kvcompass.metrics import METRICS, SERVING_KEYS, serving_summary


def _run(remote: list[bool] | None = None) -> dict[str, float]:
    # Three requests; the third never produced a first token.
    return serving_summary(
        completed=np.array([True, True, False]),
        arrival_ms=np.array([1000.0, 1500.0, 1600.0]),
        ttft_ms=np.array([100.0, 500.0, np.nan]),
        e2e_ms=np.array([300.0, 900.0, np.nan]),
        prompt_tokens=np.array([1000, 3000, 5000], dtype=np.int64),
        reused_tokens=np.array([0, 2000, 0], dtype=np.int64),
        output_tokens=np.array([10, 30, 50], dtype=np.int64),
        remote=None if remote is None else np.array(remote),
    )


def test_hit_rate__is_reused_over_prompt_tokens_and_request_hit_rate_the_share_with_any() -> None:
    s = _run()
    assert s["hit_rate"] == 2000 / 4000
    assert s["request_hit_rate"] == 0.5
    assert s["reused_tokens"] == 2000 and s["recomputed_tokens"] == 2000


def test_throughput__counts_prompt_and_output_over_the_prefill_makespan() -> None:
    s = _run()
    # last first token at 1500 + 500 = 2000 ms, first arrival (of any request) at 1000 ms
    assert s["throughput_tok_s"] == (4000 + 40) / 1.0


def test_counts__failed_is_requests_minus_completed() -> None:
    s = _run()
    assert (s["requests"], s["completed"], s["failed"]) == (3.0, 2.0, 1.0)
    assert s["ttft_p50_ms"] == 300.0 and s["e2e_p99_ms"] <= 900.0


def test_cross_region__share_is_a_fraction_and_reuse_a_count() -> None:
    s = _run(remote=[False, True, True])
    assert s["cross_region_share"] == 0.5  # the unserved third is not counted
    assert s["cross_region_reuse_requests"] == 1.0
    assert math.isnan(_run()["cross_region_share"])


def test_no_completed_request__every_figure_but_the_counts_is_nan() -> None:
    s = serving_summary(
        np.zeros(2, dtype=np.bool_),
        np.zeros(2),
        np.full(2, np.nan),
        np.full(2, np.nan),
        np.ones(2, dtype=np.int64),
        np.zeros(2, dtype=np.int64),
        np.zeros(2, dtype=np.int64),
    )
    assert set(s) == set(SERVING_KEYS)
    assert s["failed"] == 2.0
    assert all(math.isnan(v) for k, v in s.items() if k not in ("requests", "completed", "failed"))


def test_metrics_table__names_each_key_once_with_a_unit_and_meaning() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    assert all(m.unit and m.meaning for m in METRICS)
    assert set(_run(remote=[False, False, False])) == set(SERVING_KEYS)
