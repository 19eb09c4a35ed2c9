"""`kvcompass sim`: the JSON contract (fields per scheme, sim speed) on a tiny run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cli import sim as sim_cli

FIELDS = (
    "ttft_p50_ms",
    "ttft_p99_ms",
    "e2e_p99_ms",
    "throughput_tok_s",
    "peak_load_factor",
    "hit_rate",
    "reused_tokens",
    "recomputed_tokens",
)


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sim_cli.register(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_sim_json__holds_the_contract_fields_per_scheme(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    argv = ["sim", "--deployment", "paper-testbed-14x3", "--workload", "mixed", "--rate", "20"]
    argv += ["--requests", "300", "--schemes", "kvcompass,oracle", "--seed", "1"]
    assert _run([*argv, "--json", str(out), "--quiet", "--plots", str(tmp_path / "figs")]) == 0
    doc = json.loads(out.read_text())
    assert doc["sim_requests_per_s"] > 0
    for scheme in ("kvcompass", "oracle"):
        for field in FIELDS:
            assert isinstance(doc[scheme][field], float), (scheme, field)
        assert doc[scheme]["completed"] == 300
    assert any(p.suffix == ".png" for p in (tmp_path / "figs").iterdir())


def test_sim_sweep__runs_every_knob_value(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    argv = ["sim", "--deployment", "paper-testbed-14x3", "--workload", "mixed", "--rate", "20"]
    argv += ["--requests", "200", "--schemes", "kvcompass", "--sweep", "loss", "0", "0.3"]
    assert _run([*argv, "--json", str(out), "--quiet"]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [(r["knob"], r["value"]) for r in runs] == [("loss", 0.0), ("loss", 0.3)]
    lost = runs[1]["schemes"]["kvcompass"]["patch_batches_lost"]
    assert lost > 0


def test_schemes_flag__expands_groups_once_in_order() -> None:
    from sim import schemes

    got = sim_cli._schemes("kvcompass,all,ideal")
    assert got[0] == "kvcompass" and got.count("kvcompass") == 1
    assert got[1:] == [n for n in (*schemes.ALL, *schemes.IDEAL) if n != "kvcompass"]


TINY = ["sim", "--deployment", "paper-testbed-14x3", "--workload", "mixed", "--rate", "20"]


def _digests(doc_path: Path) -> object:
    """The run's JSON without what depends on the clock (wall time, replay speed)."""
    doc = json.loads(doc_path.read_text())

    def strip(x: object) -> object:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if "wall" not in k and "per_s" not in k}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip(doc)


def test_jobs__two_processes_give_the_same_records_as_one(tmp_path: Path) -> None:
    from sim import cells
    from sim.config import SimConfig
    from wire.deployments import load_deployment

    dep = load_deployment("paper-testbed-14x3")
    plan = [
        cells.Cell(cells.Source("mixed", 150, 20.0, seed), dep, scheme, SimConfig(seed=seed))
        for seed in (1, 2)
        for scheme in ("kvcompass", "oracle")
    ]
    one = cells.run_cells(plan, 1)
    two = cells.run_cells(plan, 2)
    assert [o.cell for o in two] == plan
    assert [o.result.record.digest() for o in one] == [o.result.record.digest() for o in two]
    assert len({o.result.record.digest() for o in one}) == 4  # seeds and schemes differ


def test_jobs_flag__same_json_but_for_wall_time(tmp_path: Path) -> None:
    argv = [*TINY, "--requests", "150", "--schemes", "kvcompass,oracle", "--seeds", "2"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert _run([*argv, "--jobs", "1", "--json", str(a), "--quiet"]) == 0
    assert _run([*argv, "--jobs", "2", "--json", str(b), "--quiet"]) == 0
    assert _digests(a) == _digests(b)


def test_seeds__means_spreads_and_verdicts_in_the_json(tmp_path: Path) -> None:
    out, md = tmp_path / "seeds.json", tmp_path / "seeds.md"
    argv = [*TINY, "--requests", "150", "--schemes", "kvcompass,oracle", "--seeds", "1", "3"]
    assert _run([*argv, "--jobs", "1", "--json", str(out), "--markdown", str(md), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    assert doc["seeds"] == [1, 3]
    run = doc["runs"][0]
    per = run["per_seed"]
    p99 = [per[s]["oracle"]["ttft_p99_ms"] for s in ("1", "3")]
    sp = run["spread"]["oracle"]["ttft_p99_ms"]
    assert (sp["min"], sp["max"]) == (min(p99), max(p99))
    assert run["schemes"]["oracle"]["ttft_p99_ms"] == sum(p99) / 2 == doc["oracle"]["ttft_p99_ms"]
    ratio = run["ratios"]["oracle"]["ttft_p99_ms"]
    per_ratio = [per[s]["oracle"]["ttft_p99_ms"] / per[s]["kvcompass"]["ttft_p99_ms"]
                 for s in ("1", "3")]  # fmt: skip
    assert ratio["min"] == min(per_ratio) and ratio["max"] == max(per_ratio)
    assert ratio["verdict"] in ("win", "loss", "within spread")
    assert "2 seeds" in md.read_text() and "P99 verdict" in md.read_text()


def test_seeds_flag__a_count_or_a_list() -> None:
    assert sim_cli.seeds_of(None, 7) == [7]
    assert sim_cli.seeds_of([3], 7) == [1, 2, 3]
    assert sim_cli.seeds_of([4, 9], 7) == [4, 9]
