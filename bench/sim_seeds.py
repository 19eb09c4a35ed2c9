"""Run sim/README's result cells over several seeds and print ratio tables with their spread.

A thin driver of ``kvcompass sim --seeds ... --jobs ...``: each cell is one such process writing
``<out>/<cell>.json`` (every seed's rows under ``runs[0].per_seed``); a cell whose JSON exists
is skipped, so an interrupted set resumes (files of the older one-seed-per-file layout,
``<cell>_s<seed>.json``, are still read). ``--aggregate`` prints, per cell: KVCompass's P99
TTFT, the best non-ideal baseline's ÷ ours (mean and min–max over seeds, with the verdict of
``sim.spread``, the rule ``kvcompass sim`` prints), the throughput ratio, and KVCompass's peak
load factor ÷ the Oracle's. Spreads and verdicts come from ``sim.spread``, the simulator's own
aggregation. Figures are printed, never asserted (STYLE 12).

    .venv/bin/python bench/sim_seeds.py --out runs --seeds 1 2 3 --requests 20000 --jobs 2
    .venv/bin/python bench/sim_seeds.py --out runs --seeds 1 2 3 --aggregate --markdown
    # schemes re-run on a later tree into another directory override the first one's rows:
    .venv/bin/python bench/sim_seeds.py --out runs --also runs_kv --aggregate
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from statistics import mean
from typing import Any

from sim.datasets import MOONCAKE_TRACE
from sim.spread import Spread, verdict

TRACE = str(MOONCAKE_TRACE)  # the vendored trace (sim.datasets; $KVCOMPASS_DATA_DIR moves it)
CELLS: dict[str, list[str]] = {
    "mixed-150": ["--workload", "mixed", "--rate", "150"],
    "mixed-230": ["--workload", "mixed", "--rate", "230"],
    "mixed-300": ["--workload", "mixed", "--rate", "300"],
    "wildchat-460": ["--workload", "wildchat", "--rate", "460"],
    "wildchat-680": ["--workload", "wildchat", "--rate", "680"],
    "wildchat-910": ["--workload", "wildchat", "--rate", "910"],
    "lmsys-1840": ["--workload", "lmsys", "--rate", "1840"],
    "lmsys-2760": ["--workload", "lmsys", "--rate", "2760"],
    "lmsys-3680": ["--workload", "lmsys", "--rate", "3680"],
    "trace-50": ["--trace", TRACE, "--rate", "50"],
    "trace-75": ["--trace", TRACE, "--rate", "75"],
    "trace-own": ["--trace", TRACE],
}
BASELINES = ("planetserve", "central_directory", "skywalker", "dynamo", "oracle")
OURS = "kvcompass"
ALSO = ("kvcompass_no_booking",)
IDEAL = ("central_directory_ideal", "oracle_ideal")


def run(
    out: Path, cells: list[str], seeds: list[int], requests: int, schemes: str, jobs: int
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for cell in cells:
        path = out / f"{cell}.json"
        if path.exists():
            continue
        cmd = [sys.executable, "-m", "cli", "sim", *CELLS[cell], "--requests",
               str(requests), "--schemes", schemes, "--seeds", *map(str, seeds), "--jobs",
               str(jobs), "--quiet", "--json", str(path)]  # fmt: skip
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _scheme_rows(doc: dict[str, Any]) -> dict[str, dict[str, float]]:
    runs = doc.get("runs") or []
    return dict(runs[0]["schemes"]) if runs else {}


def load_rows(dirs: list[Path], cell: str, seed: int) -> dict[str, dict[str, float]] | None:
    """The scheme rows of (cell, seed); a later directory's rows override an earlier one's."""
    rows: dict[str, dict[str, float]] = {}
    for d in dirs:
        p = d / f"{cell}.json"
        if p.exists():
            runs = json.loads(p.read_text()).get("runs") or []
            per_seed = runs[0].get("per_seed", {}) if runs else {}
            rows.update(per_seed.get(str(seed), {}))
        p = d / f"{cell}_s{seed}.json"  # the older layout: one kvcompass sim run per seed
        if p.exists():
            rows.update(_scheme_rows(json.loads(p.read_text())))
    return rows or None


def aggregate(dirs: list[Path], cells: list[str], seeds: list[int], markdown: bool) -> None:
    head = ("cell", "seeds", "ours P99 ms", "best baseline", "P99 ratio mean (min–max)",
            "thr ratio mean (min–max)", "peak LF ÷ oracle", "no-booking P99 ratio")  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for cell in cells:
        found = [load_rows(dirs, cell, s) for s in seeds]
        docs = [r for r in found if r is not None and OURS in r]
        if not docs:
            continue
        p99_ratio, thr_ratio, lf_ratio, ours_p99, nob = [], [], [], [], []
        best_names: list[str] = []
        for rows_ in docs:
            ours = rows_[OURS]
            base = {n: rows_[n] for n in BASELINES if n in rows_}
            best = min(base, key=lambda n: base[n]["ttft_p99_ms"])
            best_names.append(best)
            ours_p99.append(ours["ttft_p99_ms"])
            p99_ratio.append(base[best]["ttft_p99_ms"] / ours["ttft_p99_ms"])
            top = max(base.values(), key=lambda r: r["throughput_tok_s"])
            thr_ratio.append(top["throughput_tok_s"] / ours["throughput_tok_s"])
            if "oracle" in rows_:
                lf_ratio.append(ours["peak_load_factor"] / rows_["oracle"]["peak_load_factor"])
            for a in ALSO:
                if a in rows_:
                    nob.append(base[best]["ttft_p99_ms"] / rows_[a]["ttft_p99_ms"])

        def spread(xs: list[float], lower_is_better: bool | None = None) -> str:
            sp = Spread.of(xs)
            if not sp.n:
                return "—"
            word = "" if lower_is_better is None else f", {verdict(sp, lower_is_better)}"
            return f"{sp.mean:.2f} ({sp.lo:.2f}–{sp.hi:.2f}){word}"

        rows.append((cell, str(len(docs)), f"{mean(ours_p99):,.0f}",
                     "/".join(sorted(set(best_names))), spread(p99_ratio, True),
                     spread(thr_ratio, False), spread(lf_ratio), spread(nob, True)))  # fmt: skip
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("| " + " | ".join("---" for _ in head) + " |")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


SPAN_S = {"trace-own": 3537.0}
"""Arrival span of cells not given by a rate (the conversation trace's own timing: 3,537 s)."""
PERIOD_MS = 100.0
N_REGIONS = 8
WORKERS_PER_REGION = 8


def _span_s(cell: str, requests: float) -> float:
    if cell in SPAN_S:
        return SPAN_S[cell]
    return requests / float(CELLS[cell][CELLS[cell].index("--rate") + 1])


def per_scheme(dirs: list[Path], cells: list[str], seeds: list[int]) -> None:
    """Markdown, per cell: every scheme's P99 TTFT, throughput, peak load factor and hit rate,
    mean (min–max) over the seeds; ideal references in italics, last."""
    order = (*BASELINES, OURS, *ALSO, *IDEAL)
    for cell in cells:
        found = [r for r in (load_rows(dirs, cell, s) for s in seeds) if r is not None]
        if not found:
            continue
        print(f"\n##### {cell} ({len(found)} seeds)\n")
        print("| scheme | TTFT P99 ms | TTFT P50 ms | throughput tok/s | peak load factor "
              "| hit rate | P99 ÷ KVCompass |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for name in order:
            rows = [r[name] for r in found if name in r and OURS in r]
            if not rows:
                continue
            ours = [r[OURS] for r in found if name in r and OURS in r]

            def mm(key: str, rs: list[dict[str, float]] = rows, fmt: str = ",.0f") -> str:
                sp = Spread.of(x[key] for x in rs)
                return f"{sp.mean:{fmt}} ({sp.lo:{fmt}}–{sp.hi:{fmt}})"

            ratio = Spread.of(
                a["ttft_p99_ms"] / b["ttft_p99_ms"] for a, b in zip(rows, ours, strict=True)
            )
            label = f"*{name}*" if name in IDEAL else name
            print(f"| {label} | {mm('ttft_p99_ms')} | {mean(x['ttft_p50_ms'] for x in rows):,.0f}"
                  f" | {mean(x['throughput_tok_s'] for x in rows):,.0f}"
                  f" | {mm('peak_load_factor', fmt='.2f')}"
                  f" | {mean(x['hit_rate'] for x in rows):.1%}"
                  f" | {ratio.mean:.2f}× ({ratio.lo:.2f}–{ratio.hi:.2f})"
                  f"{'' if name == OURS else ', ' + verdict(ratio, True)} |")  # fmt: skip


def bandwidth(dirs: list[Path], cells: list[str], seeds: list[int]) -> None:
    """Markdown: KVCompass's edge-to-edge bytes per region per Δ next to the paper's bound."""
    paper = (N_REGIONS - 1) * WORKERS_PER_REGION * 16 / 8  # (R−1)(W/R)b bits, b = 16
    print(f"| cell | vectors B/region/Δ | announcements B/region/Δ | shortlists B/region/Δ "
          f"| total ÷ paper bound ({paper:.0f} B) | refusals per relay |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for cell in cells:
        found = [r for r in (load_rows(dirs, cell, s) for s in seeds) if r is not None]
        rows = [r[OURS] for r in found if OURS in r]
        if not rows:
            continue
        per = [N_REGIONS * _span_s(cell, r["requests"]) * 1000.0 / PERIOD_MS for r in rows]
        vec = mean(r["queue_vector_bytes"] / k for r, k in zip(rows, per, strict=True))
        ann = mean(r.get("announce_bytes", 0.0) / k for r, k in zip(rows, per, strict=True))
        sl = mean(r["shortlist_bytes"] / k for r, k in zip(rows, per, strict=True))
        ref = mean(r["refusals"] / max(r["relays"], 1.0) for r in rows)
        print(f"| {cell} | {vec:,.0f} | {ann:,.0f} | {sl:,.0f} | {(vec + ann + sl) / paper:.1f}×"
              f" | {ref:.1%} |")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("runs"))
    ap.add_argument("--also", type=Path, nargs="*", default=[], help="later runs that override")
    ap.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--jobs", type=int, default=0, help="kvcompass sim --jobs (0: every core)")
    ap.add_argument("--schemes", default=",".join((*BASELINES, OURS, *ALSO, *IDEAL)))
    ap.add_argument("--aggregate", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--per-scheme", action="store_true", help="every scheme's figures per cell")
    ap.add_argument("--bandwidth", action="store_true", help="KVCompass's bytes per region per Δ")
    args = ap.parse_args()
    dirs = [args.out, *args.also]
    if args.per_scheme:
        per_scheme(dirs, args.cells, args.seeds)
    elif args.bandwidth:
        bandwidth(dirs, args.cells, args.seeds)
    elif args.aggregate:
        aggregate(dirs, args.cells, args.seeds, args.markdown)
    else:
        run(args.out, args.cells, args.seeds, args.requests, args.schemes, args.jobs)


if __name__ == "__main__":
    main()
