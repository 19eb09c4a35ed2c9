"""Results tables: readable numbers, ratios to KVCompass, ideal references apart."""

from __future__ import annotations

from sim import tables

RUNS = {
    "kvcompass": {
        "ttft_p50_ms": 412.3,
        "ttft_p99_ms": 10220.0,
        "throughput_tok_s": 1.0e6,
        "e2e_p99_ms": 12000.0,
        "peak_load_factor": 1.06,
        "hit_rate": 0.426,
        "false_hit_rate": 0.0014,
    },
    "dynamo": {"ttft_p50_ms": 900.0, "ttft_p99_ms": 20440.0, "throughput_tok_s": 1.01e6},
    "central_directory_ideal": {
        "ttft_p50_ms": 300.0,
        "ttft_p99_ms": 5110.0,
        "throughput_tok_s": 2.0e6,
    },
}


def test_cells__separators_units_percent_and_no_scientific_notation() -> None:
    comp = tables.comparison(RUNS)
    row = comp.rows[0]
    assert row[:3] == ["kvcompass", "412", "10,220"]
    assert "1,000,000" in row and "42.6%" in row and "0.14%" in row
    assert not any("e+" in c for r in comp.rows + comp.ideal_rows for c in r)
    assert comp.headers[-2:] == list(tables.RATIO_HEADERS)


def test_ratios_to_kvcompass__and_ideal_rows_apart() -> None:
    comp = tables.comparison(RUNS)
    assert [r[0] for r in comp.rows] == ["kvcompass", "dynamo"]
    assert [r[0] for r in comp.ideal_rows] == ["central_directory_ideal"]
    assert comp.rows[1][-2:] == ["2.00×", "1.01×"]
    assert comp.ideal_rows[0][-2] == "0.50×"
    md = tables.markdown(comp)
    assert md.splitlines()[-1].startswith("| *central_directory_ideal* |")


def test_verdict__ignores_ideal_and_allows_two_percent_throughput() -> None:
    line = tables.verdict(RUNS)
    assert "lowest P99 TTFT yes" in line and "highest throughput yes" in line
    worse = {
        **RUNS,
        "dynamo": {**RUNS["dynamo"], "ttft_p99_ms": 9000.0, "throughput_tok_s": 1.03e6},
    }
    line = tables.verdict(worse)
    assert "lowest P99 TTFT NO" in line and "highest throughput NO" in line


def test_results_markdown__one_section_per_run_set() -> None:
    doc = {
        "workload": "mixed",
        "runs": [{"rate": 1500.0, "knob": None, "value": None, "schemes": RUNS}],
    }
    md = tables.results_markdown(doc)
    assert md.startswith("#### mixed — rate 1,500/s")
    assert "| dynamo | 900 | 20,440 |" in md and "lowest P99 TTFT yes" in md


def test_verdict__a_scheme_that_completed_nothing_is_never_the_best_other() -> None:
    nan = float("nan")
    runs = {
        "kvcompass": {"ttft_p99_ms": 100.0, "throughput_tok_s": 50.0},
        "collapsed": {"ttft_p99_ms": nan, "throughput_tok_s": nan},
        "other": {"ttft_p99_ms": 200.0, "throughput_tok_s": 40.0},
    }
    line = tables.verdict(runs)
    assert "best other other, 2.00× ours" in line and "collapsed" not in line


def test_comparison_seeds__spread_cells_and_verdict_columns() -> None:
    second = {**RUNS, "dynamo": {**RUNS["dynamo"], "ttft_p99_ms": 30660.0}}
    comp = tables.comparison_seeds([RUNS, second])
    assert comp.headers[-2:] == list(tables.VERDICT_HEADERS)
    dynamo = comp.rows[1]
    assert dynamo[0] == "dynamo" and "25,550 (20,440–30,660)" in dynamo
    assert "2.50× (2.00–3.00)" in dynamo and dynamo[-2] == "win"
    assert comp.rows[0][-2:] == ["", ""]  # no verdict against itself
    line = tables.verdict_seeds([RUNS, second])
    assert "P99 TTFT vs best other dynamo: 2.50× (2.00–3.00) ours, win" in line
    assert "central_directory_ideal" not in line


def test_verdict__a_scheme_that_failed_more_requests_is_left_out_of_the_p99_contest() -> None:
    runs = {
        "kvcompass": {"ttft_p99_ms": 2400.0, "throughput_tok_s": 130.0, "failed": 0.0},
        "collapsing": {"ttft_p99_ms": 500.0, "throughput_tok_s": 12.0, "failed": 292.0},
        "other": {"ttft_p99_ms": 2800.0, "throughput_tok_s": 130.0, "failed": 0.0},
    }
    line = tables.verdict(runs)
    assert "lowest P99 TTFT yes (best other other, 1.17× ours" in line
    assert "left out, more failed requests: collapsing" in line
    line = tables.verdict({**runs, "kvcompass": {**runs["kvcompass"], "failed": 300.0}})
    assert "best other collapsing, 0.21× ours" in line  # it failed fewer than ours: it counts
