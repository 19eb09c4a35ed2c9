"""Figures of a run set (matplotlib, Agg backend): the paper's Fig. 12, 14, 15 and Table 4 shapes.

Owns drawing only: P99 TTFT vs rate per scheme, TTFT box plots, throughput bars, per-worker
load-factor heatmaps, ablation bars, robustness-sweep lines. Must not run simulations.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from sim.experiment import RunSet


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def p99_vs_rate(sets: Sequence[RunSet], out: Path) -> Path | None:
    plain = [s for s in sets if s.knob is None]
    if len({s.rate for s in plain}) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    names = list(plain[0].results)
    for name in names:
        xs = [s.rate for s in plain if name in s.results]
        ys = [
            s.results[name].summary.get("ttft_p99_ms", np.nan) for s in plain if name in s.results
        ]
        ax.plot(xs, ys, marker="o", label=name)
    ax.set_yscale("log")
    ax.set_xlabel("arrival rate (req/s)")
    ax.set_ylabel("P99 TTFT (ms)")
    ax.legend(fontsize=7)
    return _save(fig, out / "p99_ttft_vs_rate.png")


def ttft_box(s: RunSet, out: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(s.results)
    data = [s.results[n].record.ttft_ms[np.isfinite(s.results[n].record.ttft_ms)] for n in names]
    ax.boxplot(data, tick_labels=names, whis=(1, 99), showfliers=False)
    ax.set_yscale("log")
    ax.set_ylabel("TTFT (ms), whiskers P1-P99")
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    return _save(fig, out / f"ttft_box_{s.rate:g}.png")


def throughput_bars(s: RunSet, out: Path, name: str = "throughput") -> Path:
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(s.results)
    vals = [s.results[n].summary.get("throughput_tok_s", 0.0) / 1e6 for n in names]
    ax.bar(names, vals)
    ax.set_ylabel("throughput (Mtok/s)")
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    return _save(fig, out / f"{name}_{s.rate:g}.png")


def load_heatmap(s: RunSet, out: Path) -> Path:
    names = list(s.results)
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 1.6 * len(names)), squeeze=False)
    for ax, n in zip(axes[:, 0], names, strict=True):
        lf = s.results[n].load_factor
        im = ax.imshow(lf.T, aspect="auto", cmap="magma", vmin=0, vmax=3, interpolation="none")
        peak = s.results[n].summary.get("peak_load_factor", float("nan"))
        ax.set_title(f"{n} (peak {peak:.2f})", fontsize=8)
        ax.set_ylabel("worker", fontsize=7)
        fig.colorbar(im, ax=ax)
    axes[-1, 0].set_xlabel("time bin")
    return _save(fig, out / f"load_factor_{s.rate:g}.png")


def ablation_bars(s: RunSet, out: Path) -> Path | None:
    abl = [n for n in s.results if n.startswith("kvcompass")]
    if "kvcompass" not in abl or len(abl) < 2:
        return None
    base = s.results["kvcompass"].summary["throughput_tok_s"]
    fig, ax = plt.subplots(figsize=(6, 4))
    vals = [100.0 * s.results[n].summary["throughput_tok_s"] / base for n in abl]
    ax.bar([n.replace("kvcompass_", "") for n in abl], vals)
    ax.set_ylabel("throughput (% of full KVCompass)")
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    return _save(fig, out / f"ablation_{s.rate:g}.png")


def sweep_lines(sets: Sequence[RunSet], out: Path) -> Path | None:
    swept = [s for s in sets if s.knob is not None]
    if not swept:
        return None
    knob = swept[0].knob
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for name in swept[0].results:
        xs = [s.value for s in swept]
        a1.plot(xs, [s.results[name].summary["ttft_p99_ms"] for s in swept], marker="o", label=name)
        a2.plot(xs, [100 * s.results[name].summary["hit_rate"] for s in swept], marker="o")
    a1.set_xlabel(str(knob))
    a1.set_ylabel("P99 TTFT (ms)")
    a2.set_xlabel(str(knob))
    a2.set_ylabel("hit rate (%)")
    a1.legend(fontsize=7)
    return _save(fig, out / f"sweep_{knob}.png")


def write_all(sets: Sequence[RunSet], out: Path) -> list[Path]:
    """Every figure the run set supports; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path | None] = [p99_vs_rate(sets, out), sweep_lines(sets, out)]
    for s in sets:
        if s.knob is not None:
            continue
        paths += [ttft_box(s, out), throughput_bars(s, out), load_heatmap(s, out)]
        paths.append(ablation_bars(s, out))
    return [p for p in paths if p is not None]
