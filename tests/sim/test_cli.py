"""`kvcompass sim`: the JSON contract (fields per scheme, sim speed) on a tiny run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvcompass.cli import sim as sim_cli

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
