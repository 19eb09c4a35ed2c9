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
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from rich.console import Console
from rich.table import Table

from e2e.loadgen import Results
from kvcompass.metrics import serving_summary
from sim import tables

_SIM = {key: (key, head, kind) for key, head, kind in tables.COLUMNS}
COLUMNS: tuple[tuple[str, str, str], ...] = (
    *(_SIM[k] for k in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p99_ms", "throughput_tok_s")),
    _SIM["hit_rate"],
    ("cross_region_share", "cross-region", "share"),
    ("failed", "failed", "count"),
)
"""Value columns: (``kvcompass.metrics`` key, header, ``sim.tables.fmt`` kind). Keys and
headers are the simulator's (``sim.tables.COLUMNS``) where both have them; the ratio columns
after them are ``sim.tables``' too."""


def summarise(
    res: Results, worker_region: NDArray[np.int64], since_ms: float = 0.0
) -> dict[str, float]:
    """The comparison figures of one run (``kvcompass.metrics.serving_summary``) over the requests
    that arrived at or after ``since_ms`` (model ms after the first arrival: the warm-up before it
    is served but not summarised).

    A response without ``X-KVC-Worker`` (SGLang's gateway does not name the worker; it only
    knows its own region's) counts as served in its origin region."""
    keep = res.arrival_ms >= since_ms
    ok = res.ok[keep]
    served = res.worker[keep]
    origin = res.origin[keep]
    remote = np.zeros(len(served), dtype=np.bool_)
    known = ok & (served >= 0)
    remote[known] = worker_region[served[known]] != origin[known]
    return serving_summary(
        ok,
        res.arrival_ms[keep],
        res.ttft_ms[keep],
        res.e2e_ms[keep],
        res.prompt_tokens[keep],
        # -1: the response carried no meta_info; count it as no reuse rather than negative reuse
        np.maximum(res.cached_tokens[keep], 0),
        res.output_tokens[keep],
        remote,
    )


def run_line(row: dict[str, Any]) -> str:
    """One finished run, for the log: ``TTFT P50 412 ms, P99 2,133 ms, 512/512 completed``."""
    p50, p99 = float(row.get("ttft_p50_ms", math.nan)), float(row.get("ttft_p99_ms", math.nan))
    return (
        f"TTFT P50 {tables.fmt(p50, 'ms')} ms, P99 {tables.fmt(p99, 'ms')} ms, "
        f"hit rate {tables.fmt(float(row.get('hit_rate', math.nan)), 'share')}, "
        f"{int(row['completed'])}/{int(row['requests'])} completed"
    )


def comparison_tables(rows: Sequence[dict[str, Any]]) -> list[tuple[str, Table, list[str]]]:
    """One table per (workload, origin mix): a section per rate, every scheme's figures and its
    ratios to KVCompass (``sim.tables.comparison``, the simulator's layout), and per rate the
    simulator's verdict line. Returns (title, table, verdict lines)."""
    out: list[tuple[str, Table, list[str]]] = []
    for wl, origins in dict.fromkeys((str(r["workload"]), str(r["origins"])) for r in rows):
        sub = [r for r in rows if r["workload"] == wl and r["origins"] == origins]
        title = f"{wl}, origins {origins}"
        t = Table(title=title, title_justify="left")
        t.add_column("rate req/s", justify="right", no_wrap=True)
        verdicts: list[str] = []
        first = True
        for rate in sorted({float(r["rate"]) for r in sub}):
            summaries = {str(r["scheme"]): r for r in sub if float(r["rate"]) == rate}
            comp = tables.comparison(summaries, columns=COLUMNS)
            if first:
                for i, h in enumerate(comp.headers):
                    t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
                first = False
            else:
                t.add_section()
            for k, cells in enumerate(comp.rows):
                t.add_row(f"{rate:g}" if k == 0 else "", *cells)
            line = tables.verdict(summaries)
            if line:
                verdicts.append(f"{rate:g} req/s: {line}")
        out.append((title, t, verdicts))
    return out


REUSE_HEADERS: tuple[tuple[str, str], ...] = (
    ("reusable", "reusable"), ("captured", "captured"), ("delivered", "delivered"),
    ("forgone_wan", "forgone for WAN"), ("lost_stale", "lost to staleness"),
)  # fmt: skip
"""The split's kinds (``kvcompass.reuse_split.REUSE_KINDS``) in the order a reader follows."""


def reuse_tables(rows: Sequence[dict[str, Any]]) -> list[Table]:
    """Per (workload, origin mix): where each edge scheme's reusable prefix went, as shares of
    the measured prompt tokens (``e2e.reuse``; the gateway reports none)."""
    out: list[Table] = []
    split_rows = [r for r in rows if isinstance(r.get("reuse_tokens"), dict)]
    for wl, origins in dict.fromkeys((str(r["workload"]), str(r["origins"])) for r in split_rows):
        t = Table(title=f"{wl}, origins {origins}: where the reusable prefix went (share of "
                        "prompt tokens)", title_justify="left")  # fmt: skip
        for h in ("rate req/s", "scheme", *(h for _, h in REUSE_HEADERS), "explained"):
            t.add_column(h, justify="left" if h == "scheme" else "right", no_wrap=True)
        sub = [r for r in split_rows if (r["workload"], r["origins"]) == (wl, origins)]
        for r in sorted(sub, key=lambda r: float(r["rate"])):
            split = r["reuse_tokens"]
            prompt = max(int(split.get("prompt", 0)), 1)
            shares = (tables.fmt(int(split.get(k, 0)) / prompt, "share") for k, _ in REUSE_HEADERS)
            t.add_row(f"{float(r['rate']):g}", str(r["scheme"]), *shares,
                      f"{int(split.get('explained', 0))}/{int(r['requests'])}")  # fmt: skip
        out.append(t)
    return out


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[dict[str, Any]]) -> None:
    path.write_text(json.dumps({"meta": meta, "runs": list(rows)}, indent=2, default=float))


def plot(rows: Sequence[dict[str, Any]], out_dir: Path, *, note: str = "") -> list[Path]:
    """P99 TTFT vs rate, throughput and hit rate per scheme, one figure per (workload, origin
    mix): ``e2e-<workload>-<origins>.png``; returns the files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths: list[Path] = []
    for wl, origins in dict.fromkeys((str(r["workload"]), str(r["origins"])) for r in rows):
        sub = [r for r in rows if r["workload"] == wl and r["origins"] == origins]
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
        what = f"{wl}, origins {origins}"
        a1.set(xlabel="arrival rate (req/s, model time)", ylabel="P99 TTFT (ms)", yscale="log",
               title=f"{what}: P99 TTFT")  # fmt: skip
        a1.set_xticks(rates, [f"{r:g}" for r in rates])
        for ax, label in (
            (a2, "throughput (prompt + output tok/s)"),
            (a3, "hit rate (reused / prompt tok)"),
        ):
            ax.set_xticks(np.arange(len(rates)) + 0.4 - width / 2, [f"{r:g}" for r in rates])
            ax.set(xlabel="arrival rate (req/s)", ylabel=label, title=f"{what}: {label}")
        a1.legend(fontsize=8)
        if note:
            fig.text(0.01, 0.01, note, fontsize=7, color="gray")
        fig.tight_layout(rect=(0, 0.04, 1, 1))
        path = out_dir / f"e2e-{wl}-{origins}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` at its natural width, never wrapped or cut: a console on a pipe or a file
    is 80 columns wide by default, which squeezed cells into ``│ mai… │``."""
    from rich.measure import Measurement

    natural = Measurement.get(console, console.options.update_width(100_000), table).maximum
    width = console.width
    console.width = max(natural, width)
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def console() -> Console:
    """The console of ``demo`` and ``demo-faults``: the terminal's width on a terminal; on a pipe
    or a file wide enough for every line (tables print at their own width, ``print_table``)."""
    c = Console()
    return c if c.is_terminal else Console(width=160)
