"""e2e.report: the demo's figures are kvcompass.metrics' figures, from hand-made load results."""

from __future__ import annotations

import dataclasses
import io
import math

import numpy as np
from rich.console import Console

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
    row = {"workload": "w", "origins": "uniform", "rate": 1.0, "scheme": "x", **s}
    [(title, table, verdicts)] = report.comparison_tables([row])
    assert title == "w, origins uniform" and table.row_count == 1 and verdicts == []


def test_summarise__since_ms_leaves_the_warm_up_out() -> None:
    worker_region = np.array([0, 0, 1], dtype=np.int64)
    s = report.summarise(_results(), worker_region, since_ms=100.0)
    assert (s["requests"], s["completed"], s["failed"]) == (2.0, 1.0, 1.0)
    assert s["hit_rate"] == 0.0 and s["cross_region_share"] == 1.0
    # the span starts at the first measured arrival (100 ms), not at the warm-up's
    assert s["throughput_tok_s"] == (3000 + 30) / 0.4


def test_summarise__no_worker_header_counts_as_served_in_the_origin_region() -> None:
    # SGLang's gateway names no worker: its requests are its own region's by construction
    res = dataclasses.replace(_results(), worker=np.full(3, -1, dtype=np.int64))
    s = report.summarise(res, np.array([0, 0, 1], dtype=np.int64))
    assert s["cross_region_share"] == 0.0 and s["completed"] == 2.0


def _row(scheme: str, rate: float, p99: float, tput: float) -> dict[str, object]:
    return {"workload": "mixed", "origins": "workers", "rate": rate, "scheme": scheme,
            "ttft_p50_ms": p99 / 4, "ttft_p99_ms": p99, "e2e_p99_ms": p99 + 100.0,
            "throughput_tok_s": tput, "hit_rate": 0.25, "cross_region_share": 0.1,
            "failed": 0.0, "requests": 10.0, "completed": 10.0}  # fmt: skip


def test_comparison_tables__one_per_origin_mix_ratios_to_kvcompass_and_a_verdict_per_rate() -> None:
    rows = [
        _row("kvcompass", 8, 1000.0, 5000.0),
        _row("sglang_router", 8, 2500.0, 4000.0),
        _row("kvcompass", 32, 3000.0, 9000.0),
        _row("local_least_loaded", 32, 2000.0, 9000.0),
        {**_row("kvcompass", 8, 900.0, 5000.0), "origins": "uniform"},
    ]
    out = report.comparison_tables(rows)
    assert [t for t, _, _ in out] == ["mixed, origins workers", "mixed, origins uniform"]
    _, table, verdicts = out[0]
    assert table.row_count == 4
    cells = [list(c.cells) for c in table.columns]
    assert cells[0] == ["8", "", "32", ""]  # the rate once per section
    ratio = next(c for c in table.columns if c.header == "P99 TTFT ÷ KVCompass")
    assert list(ratio.cells) == ["1.00×", "2.50×", "1.00×", "0.67×"]
    assert verdicts[0].startswith("8 req/s: kvcompass: lowest P99 TTFT yes")
    assert "lowest P99 TTFT NO (best other local_least_loaded, 0.67× ours)" in verdicts[1]


def test_print_table__a_pipe_gets_the_whole_table_never_cut_or_wrapped() -> None:
    buf = io.StringIO()
    narrow = Console(file=buf, width=80)  # what rich picks for a pipe or a file
    rows = [_row("kvcompass", 8, 1000.0, 5000.0), _row("consistent_hash", 8, 1e6, 10.0)]
    [(_, table, _)] = report.comparison_tables(rows)
    report.print_table(narrow, table)
    text = buf.getvalue()
    assert "…" not in text and "consistent_hash" in text and "1,000,000" in text
    widths = {len(line) for line in text.splitlines() if line.startswith(("┃", "│"))}
    assert len(widths) == 1 and widths.pop() > 80  # every line whole, wider than the pipe


def test_demo_faults_table__whole_in_a_pipe() -> None:
    from rich.table import Table

    from cli.demo_faults import _table
    from e2e.faults import EdgeTally, PhaseStats, ScenarioResult
    from e2e.probes import EventCount, ViewCheck

    views = ViewCheck(10, 424, {"us": (424, 0, 0), "eu": (424, 0, 0), "asia": (424, 0, 0)})
    events = EventCount(2327, 0, 2300, 2300, 5000, 5000, 0, 0)
    load = PhaseStats("maintenance-crash", {"us": EdgeTally(served=155)})
    res = ScenarioResult("maintenance-crash", "SIGKILL maintenance-0, 12 s down, restart", 31.6,
                         load, 2.8, views, events)  # fmt: skip
    buf = io.StringIO()
    report.print_table(Console(file=buf, width=80), _table([res], Table))
    text = buf.getvalue()
    assert "…" not in text and "maintenance-crash" in text and "SIGKILL maintenance-0" in text
    assert views.line() == "views: 3 edges × 424 entries, 0 mismatched"
    assert events.line() == "events: 2,327 accepted, 0 lost, 0 dead letters"
