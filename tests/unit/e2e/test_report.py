"""e2e.report: the demo's figures are kvcompass.metrics' figures, from hand-made load results."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from e2e import report
from e2e.loadgen import Results


def _results() -> Results:
    # Request 0: origin 0, served in region 0, 600 of 1000 tokens cached. Request 1: origin 0,
    # served in region 1 with no cache report (-1). Request 2: failed (503).
    return Results(
        origin=np.array([0, 0, 1], dtype=np.int64),
        arrival_ms=np.array([0.0, 100.0, 200.0]),
        prompt_tokens=np.array([1000, 3000, 500], dtype=np.int64),
        ttft_ms=np.array([50.0, 400.0, -1.0]),
        e2e_ms=np.array([90.0, 700.0, -1.0]),
        worker=np.array([0, 2, -1], dtype=np.int64),
        cached_tokens=np.array([600, -1, -1], dtype=np.int64),
        output_tokens=np.array([10, 30, 0], dtype=np.int64),
        status=np.array([200, 200, 503], dtype=np.int64),
        span_ms=800.0,
        errors=("503: busy",),
    )


def test_summarise__token_hit_rate_request_hit_rate_and_honest_cross_region_names() -> None:
    worker_region = np.array([0, 0, 1], dtype=np.int64)
    s = report.summarise(_results(), worker_region)
    assert (s["requests"], s["completed"], s["failed"]) == (3.0, 2.0, 1.0)
    assert s["hit_rate"] == 600 / 4000  # reused / prompt tokens, as in the simulator
    assert s["request_hit_rate"] == 0.5
    assert s["cross_region_share"] == 0.5 and s["cross_region_reuse_requests"] == 0.0
    # (prompt + output) / (last first token at 100 + 400 ms - first arrival at 0)
    assert s["throughput_tok_s"] == (4000 + 40) / 0.5


def test_summarise__nothing_completed_gives_nan_figures_and_the_table_renders() -> None:
    failed = dataclasses.replace(_results(), status=np.full(3, 503, dtype=np.int64))
    s = report.summarise(failed, np.array([0, 0, 1], dtype=np.int64))
    assert s["failed"] == 3.0 and math.isnan(s["hit_rate"])
    table = report.table([{"workload": "w", "rate": 1.0, "scheme": "x", **s}], "t")
    assert table.row_count == 1
