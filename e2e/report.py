"""Summaries of load-generator results: per-run metrics, the comparison table, JSON and plots.

Owns the definitions of every figure the end-to-end demo prints (all in model time, see
``e2e.loadgen``): TTFT P50/P99 and end-to-end P99 over completed requests; throughput = output
tokens completed / span (first arrival → last completion); hit rate = share of completed
requests with ``cached_tokens > 0``; reuse = Σ cached / Σ prompt tokens; cross-region = share of
completed requests served by a worker outside the origin region, and the share of those that
reused a cache there ("cross-region reuse"); failures = requests without a 200 response. Must not
run anything.
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

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ttft_p50_ms", "TTFT P50 ms", "{:.0f}"),
    ("ttft_p99_ms", "TTFT P99 ms", "{:.0f}"),
    ("e2e_p99_ms", "E2E P99 ms", "{:.0f}"),
    ("throughput_tok_s", "tok/s", "{:.0f}"),
    ("hit_rate", "hit rate", "{:.0%}"),
    ("reuse_ratio", "reused", "{:.0%}"),
    ("cross_region_share", "x-region", "{:.1%}"),
    ("cross_region_reuse", "x-reuse", "{:.0f}"),
    ("failed", "failed", "{:.0f}"),
)


def summarise(res: Results, worker_region: NDArray[np.int64]) -> dict[str, float]:
    """The comparison figures of one run (see the module docstring for each definition)."""
    ok = res.ok
    n_ok = int(ok.sum())
    out: dict[str, float] = {
        "requests": float(len(res.status)),
        "completed": float(n_ok),
        "failed": float(len(res.status) - n_ok),
    }
    if n_ok == 0:
        for key, _, _ in COLUMNS:
            out.setdefault(key, float("nan"))
        return out
    ttft = res.ttft_ms[ok]
    e2e = res.e2e_ms[ok]
    cached = np.maximum(res.cached_tokens[ok], 0)
    served = res.worker[ok]
    known = served >= 0
    remote = np.zeros(n_ok, dtype=bool)
    remote[known] = worker_region[served[known]] != res.origin[ok][known]
    out.update(
        ttft_p50_ms=float(np.percentile(ttft, 50)),
        ttft_p99_ms=float(np.percentile(ttft, 99)),
        e2e_p50_ms=float(np.percentile(e2e, 50)),
        e2e_p99_ms=float(np.percentile(e2e, 99)),
        throughput_tok_s=float(res.output_tokens[ok].sum() / (res.span_ms / 1000.0))
        if res.span_ms > 0
        else float("nan"),
        hit_rate=float((cached > 0).mean()),
        reuse_ratio=float(cached.sum() / max(int(res.prompt_tokens[ok].sum()), 1)),
        reused_tokens=float(cached.sum()),
        recomputed_tokens=float((res.prompt_tokens[ok] - cached).sum()),
        cross_region_share=float(remote.mean()),
        cross_region_reuse=float((remote & (cached > 0)).sum()),
    )
    return out


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
            a3.bar(idx + k * width, [p[1].get("reuse_ratio", 0.0) for p in pts], width, label=s)
        a1.set(xlabel="arrival rate (req/s, model time)", ylabel="P99 TTFT (ms)", yscale="log",
               title=f"{wl}: P99 TTFT")  # fmt: skip
        for ax, what in ((a2, "throughput (output tok/s)"), (a3, "reused / prompt tokens")):
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
