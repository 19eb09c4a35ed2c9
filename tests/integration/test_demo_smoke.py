"""``make demo``'s comparison, short: the same plan, code path and report on a 4-worker deployment.

Every default scheme — KVCompass, SGLang's own gateway (``sglang-router`` from PyPI, one per
region in ``cache_aware`` mode), least-loaded and consistent hashing — serves the same warm-up
and measured requests from cold caches; the warm-up is left out of the figures; the gateway keeps
every request in its region; the closing checks hold and read as one line each; the tables print
whole into a pipe-wide console; one figure per origin mix is written.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from e2e import report
from e2e.cluster import ClusterSpec, LocalCluster
from e2e.demo import run_demo, runs
from e2e.gateways import gateway_missing
from e2e.spec import BURST_SCHEMES, DEFAULT_SCHEMES, SGLANG_GATEWAY, DemoPlan
from tests.ci import missing
from tests.integration.small_deployment import small_deployment

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]


def test_demo__every_scheme_incl_sglang_gateway__measured_after_warmup_checks_hold(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    if gateway_missing():
        missing(gateway_missing())
    dep = small_deployment(tmp_path, 2)
    scale = 0.25
    plan = DemoPlan(
        deployment=dep, mixed_rates=(6.0,), origin_mixes=("uniform",), warmup_s=2.0,
        measure_s=4.0, time_scale=scale, out_dir=tmp_path / "out", burst_rates=(8.0,),
    )  # fmt: skip
    spec = ClusterSpec(deployment=dep, time_scale=scale, n_maintenance=1,
                       stream_interval=16, bootstrap_servers=kafka_bootstrap,
                       topic_prefix=topic_prefix)  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, width=80)  # a pipe's width
    skipped: dict[str, str] = {}
    rows, checks = run_demo(
        plan, lambda: LocalCluster(spec, tmp_path / "run"), console, skipped=skipped
    )
    assert skipped == {}
    [run, burst] = runs(plan)
    warm = int((run.requests.arrival_ms - run.requests.arrival_ms[0] < 2000.0).sum())
    assert 0 < warm < len(run.requests)
    # the burst run (issue 25): KVCompass with and without booking, on its own requests; one
    # burst in the warm-up, one measured (24 requests from every region within 100 ms)
    assert burst.workload == "burst" and burst.schemes == BURST_SCHEMES
    burst_rows, rows = rows[len(DEFAULT_SCHEMES) :], rows[: len(DEFAULT_SCHEMES)]
    assert [r["scheme"] for r in burst_rows] == list(BURST_SCHEMES)
    for r in burst_rows:
        assert r["requests"] == 24 and r["completed"] > 0, r
        assert sum(r["served_per_worker"]) == r["completed"], r
    assert [r["scheme"] for r in rows] == list(DEFAULT_SCHEMES)
    for r in rows:
        assert r["warmup_requests"] == warm, r
        assert r["requests"] == len(run.requests) - warm, r  # the warm-up is not summarised
        assert r["completed"] == r["requests"] and r["failed"] == 0, r.get("errors")
        assert r["ttft_p50_ms"] <= r["ttft_p99_ms"] <= r["e2e_p99_ms"], r
        assert 0.0 <= r["hit_rate"] < 1.0, r
    gateway = next(r for r in rows if r["scheme"] == SGLANG_GATEWAY)
    assert gateway["cross_region_share"] == 0.0  # it fronts its own region's workers only
    edge_rows = [r for r in rows if r["scheme"] != SGLANG_GATEWAY]
    assert all(sum(r["served_per_worker"]) == r["completed"] for r in edge_rows)
    assert "reuse_tokens" not in gateway  # the edges' split (issue 30 item 3); the gateway has none
    for r in edge_rows + burst_rows:
        split = r["reuse_tokens"]
        assert split["explained"] >= r["completed"], (r["scheme"], split)
        assert split["captured"] <= split["reusable"] <= split["prompt"], (r["scheme"], split)
        assert split["forgone_wan"] <= split["reusable"] - split["captured"], (r["scheme"], split)
    for r in rows + burst_rows:  # each measured request, for a post-mortem
        per = r["per_request"]
        assert len(per["ttft_ms"]) == len(per["worker"]) == r["requests"], r["scheme"]
    for r in edge_rows:  # every request completed: the engine's counts are the edges' counts
        assert r["reuse_tokens"]["delivered"] == r["reused_tokens"], r["scheme"]
    assert checks["views"]["ok"] and checks["events"]["ok"], checks
    views, events = checks["lines"]
    assert views.startswith("views: 3 edges × ") and views.endswith(" 0 mismatched"), views
    assert events.startswith("events: ") and ", 0 lost, 0 dead letters" in events, events

    [(title, table, verdicts), (burst_title, _, _)] = report.comparison_tables(rows + burst_rows)
    assert burst_title == "burst, origins uniform"
    assert title == "mixed, origins uniform" and len(verdicts) == 1
    report.print_table(console, table)
    text = out.getvalue()
    assert "…" not in text and all(s in text for s in DEFAULT_SCHEMES)
    split_tables = report.reuse_tables(rows + burst_rows)
    assert [t.row_count for t in split_tables] == [len(edge_rows), len(burst_rows)]
    [png, _] = report.plot(rows + burst_rows, plan.out_dir)
    assert png.name == "e2e-mixed-uniform.png" and png.stat().st_size > 10_000
