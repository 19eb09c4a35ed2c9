"""Summaries of load-generator results: per-run metrics, the comparison table, JSON and plots.

Owns turning ``e2e.loadgen.Results`` (model time) into the figures of ``kvcompass.metrics``, whose
names, units and meanings are the simulator's too (``hit_rate`` = reused ÷ prompt tokens,
``request_hit_rate`` = share of requests with any reuse, ``throughput_tok_s`` = prompt + output
tokens over the prefill makespan, ``cross_region_share`` a share and
``cross_region_reuse_requests`` a count); a completed request is one with a 200 response and a
first token, ``failed`` the rest. Must not run anything.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from rich.console import Console
from rich.table import Table

from e2e.loadgen import Results
from kvcompass.metrics import serving_summary

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ttft_p50_ms", "TTFT P50 ms", "{:.0f}"),
    ("ttft_p99_ms", "TTFT P99 ms", "{:.0f}"),
    ("e2e_p99_ms", "E2E P99 ms", "{:.0f}"),
    ("throughput_tok_s", "tok/s", "{:.0f}"),
    ("hit_rate", "hit rate", "{:.0%}"),
    ("request_hit_rate", "req hit", "{:.0%}"),
    ("cross_region_share", "x-region", "{:.1%}"),
    ("cross_region_reuse_requests", "x-reuse", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
)
"""Table columns: (``kvcompass.metrics`` key, header, format)."""


def summarise(res: Results, worker_region: NDArray[np.int64]) -> dict[str, float]:
    """The comparison figures of one run (``kvcompass.metrics.serving_summary``)."""
    ok = res.ok
    served = res.worker
    remote = np.zeros(len(served), dtype=np.bool_)
    known = ok & (served >= 0)
    remote[known] = worker_region[served[known]] != res.origin[known]
    return serving_summary(
        ok,
        res.arrival_ms,
        res.ttft_ms,
        res.e2e_ms,
        res.prompt_tokens,
        # -1: the response carried no meta_info; count it as no reuse rather than negative reuse
        np.maximum(res.cached_tokens, 0),
        res.output_tokens,
        remote,
    )


def table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    """One row per (workload, rate, scheme) record (``summarise`` output plus those keys)."""
    t = Table(title=title, title_justify="left")
    for name in ("workload", "rate", "scheme"):
        t.add_column(name, justify="right" if name == "rate" else "left")
    for _, head, _ in COLUMNS:
        t.add_column(head, justify="right")
    best: dict[tuple[str, float], float] = {}
    for r in rows:
        k = (str(r["workload"]), float(r["rate"]))
        best[k] = min(best.get(k, float("inf")), float(r.get("ttft_p99_ms", float("inf"))))
    for r in rows:
        cells = [str(r["workload"]), f"{r['rate']:g}", str(r["scheme"])]
        for key, _, fmt in COLUMNS:
            v = r.get(key, float("nan"))
            s = "—" if v is None or (isinstance(v, float) and np.isnan(v)) else fmt.format(v)
            if key == "ttft_p99_ms" and v == best[(str(r["workload"]), float(r["rate"]))]:
                s = f"[bold green]{s}[/]"
            cells.append(s)
        t.add_row(*cells)
    return t


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"meta": meta, "runs": list(rows)}, indent=2, default=float))


def plot(rows: Sequence[dict[str, Any]], out_dir: Path, *, note: str = "") -> list[Path]:
    """P99 TTFT vs rate and throughput per scheme, one figure per workload; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    for wl in sorted({str(r["workload"]) for r in rows}):
        sub = [r for r in rows if r["workload"] == wl]
        schemes = list(dict.fromkeys(str(r["scheme"]) for r in sub))
        rates = sorted({float(r["rate"]) for r in sub})
        fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4.2))
        width = 0.8 / max(len(schemes), 1)
        for k, s in enumerate(schemes):
            pts = sorted((float(r["rate"]), r) for r in sub if r["scheme"] == s)
            xs = [p[0] for p in pts]
            a1.plot(xs, [p[1].get("ttft_p99_ms", np.nan) for p in pts], marker="o", label=s)
            idx = np.array([rates.index(x) for x in xs], dtype=float)
            a2.bar(idx + k * width, [p[1].get("throughput_tok_s", 0.0) for p in pts], width,
                   label=s)  # fmt: skip
            a3.bar(idx + k * width, [p[1].get("hit_rate", 0.0) for p in pts], width, label=s)
        a1.set(xlabel="arrival rate (req/s, model time)", ylabel="P99 TTFT (ms)", yscale="log",
               title=f"{wl}: P99 TTFT")  # fmt: skip
        for ax, what in (
            (a2, "throughput (prompt + output tok/s)"),
            (a3, "hit rate (reused / prompt tok)"),
        ):
            ax.set_xticks(np.arange(len(rates)) + 0.4 - width / 2, [f"{r:g}" for r in rates])
            ax.set(xlabel="arrival rate (req/s)", ylabel=what, title=f"{wl}: {what}")
        a1.legend(fontsize=8)
        if note:
            fig.text(0.01, 0.01, note, fontsize=7, color="gray")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        path = out_dir / f"e2e-{wl}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def print_table(console: Console, rows: Sequence[dict[str, Any]], title: str) -> None:
    console.print(table(rows, title))
