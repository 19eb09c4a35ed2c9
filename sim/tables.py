"""Results tables for people: every scheme beside KVCompass, ratios included, ideal rows apart.

Owns the layout and number formatting of one run set's comparison (the CLI prints it with rich,
sim/README pastes its Markdown): units in the headers, thousands separators, percentages for
shares, ``×`` ratios to the reference scheme, never scientific notation. ``*_ideal`` references
(exact live state, sim/README "who knows what, when") come after a separator and are left out of
``verdict``, which says whether the reference has the lowest P99 TTFT and the highest throughput
of every other non-ideal scheme; so are ablations of a baseline (``NOT_BASELINES``). With
``joint_ideal`` in a run set every table has a ``P99 TTFT ÷ joint_ideal`` column (``BOUND``).
Must not compute metrics (``sim.metrics`` does) or print.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim import spread

REFERENCE = "kvcompass"

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("ttft_p50_ms", "TTFT P50 ms", "ms"),
    ("ttft_p99_ms", "TTFT P99 ms", "ms"),
    ("e2e_p99_ms", "E2E P99 ms", "ms"),
    ("throughput_tok_s", "throughput tok/s", "count"),
    ("peak_load_factor", "peak load factor", "factor"),
    ("hit_rate", "hit rate", "share"),
    ("false_hit_rate", "false hits", "share"),
)
"""(summary field, header, kind) of the value columns, in order."""

RATIO_HEADERS = ("P99 TTFT ÷ KVCompass", "throughput ÷ KVCompass")
VERDICT_HEADERS = ("P99 verdict", "throughput verdict")
"""KVCompass's verdict against the row's scheme per ratio (``sim.spread.verdict``)."""

BOUND = "joint_ideal"
"""KVCompass's own joint score with exact state and no lookup or sync cost (issue 34): when a run
set has it, every table gets a column ``P99 TTFT ÷ joint_ideal`` (the reference's row: the
headroom left from information alone) and ``verdict_seeds`` states the reference's headroom."""

NOT_BASELINES = frozenset({"central_directory_no_booking"})
"""Ablations of a baseline (the directory without its dispatch ledger, issue 34): shown in the
tables, never the best other scheme a verdict compares with."""

THROUGHPUT_SLACK = 0.02
"""Issue 14's throughput tolerance: within 2% of the best other scheme counts as highest."""


def fmt(value: float, kind: str) -> str:
    """One cell: ``ms``/``count`` as integers with separators, shares in %, factors 2 places."""
    if not math.isfinite(value):
        return "—"
    if kind in ("ms", "count"):
        return f"{value:,.0f}"
    if kind == "share":
        return f"{100.0 * value:.1f}%" if value >= 0.01 or value == 0 else f"{100 * value:.2f}%"
    if kind == "ratio":
        return f"{value:,.2f}×"
    return f"{value:.2f}"


@dataclass(frozen=True, slots=True)
class Comparison:
    """One run set laid out: headers, the non-ideal rows, the ideal rows (each a list of cells)."""

    headers: list[str]
    rows: list[list[str]]
    ideal_rows: list[list[str]]


def is_ideal(name: str) -> bool:
    """An idealised reference (exact live state): shown apart, never a win or a loss."""
    return name.endswith("_ideal")


def in_verdict(name: str) -> bool:
    """Whether a verdict may compare with ``name``: a baseline, not a reference or an ablation
    of a baseline."""
    return not is_ideal(name) and name not in NOT_BASELINES


def comparison(
    summaries: Mapping[str, Mapping[str, float]],
    reference: str = REFERENCE,
    columns: Sequence[tuple[str, str, str]] = COLUMNS,
) -> Comparison:
    """Every scheme's values and its ratios to ``reference`` (ratios "—" without it).

    ``columns``: (summary field, header, kind) of the value columns; the simulator's by default,
    the demo passes its own (``e2e.report.COLUMNS``: no simulator-only field)."""
    return comparison_seeds([summaries], reference, columns, verdicts=False)


def comparison_seeds(
    per_seed: Sequence[Mapping[str, Mapping[str, float]]],
    reference: str = REFERENCE,
    columns: Sequence[tuple[str, str, str]] = COLUMNS,
    *,
    verdicts: bool = True,
) -> Comparison:
    """``comparison`` over several seeds: each cell "mean (min–max)" (one seed, or no spread:
    the value alone), each ratio computed per seed then spread (``sim.spread``), and with
    ``verdicts`` one column per ratio saying "win", "loss" or "within spread"."""
    sp = spread.scheme_spread(per_seed)
    headers = ["scheme", *(h for _, h, _ in columns), *RATIO_HEADERS]
    if verdicts:
        headers += list(VERDICT_HEADERS)
    bound = any(BOUND in s for s in per_seed) and reference != BOUND
    if bound:
        headers.append(f"P99 TTFT ÷ {BOUND}")
    has_ref = any(reference in s for s in per_seed)
    rows: list[list[str]] = []
    ideal: list[list[str]] = []
    for name, row in sp.items():
        nan = spread.Spread.of(())
        cells = [name, *(fmt_spread(row.get(f, nan), kind) for f, _, kind in columns)]
        ratios = [
            spread.ratio_spread(per_seed, name, f, reference) if has_ref else nan
            for f in spread.LOWER_IS_BETTER
        ]
        cells += [fmt_spread(r, "ratio") for r in ratios]
        if verdicts:
            cells += [
                "" if name == reference else spread.verdict(r, lower)
                for r, lower in zip(ratios, spread.LOWER_IS_BETTER.values(), strict=True)
            ]
        if bound:
            to_bound = spread.ratio_spread(per_seed, name, "ttft_p99_ms", BOUND)
            cells.append(fmt_spread(to_bound, "ratio"))
        (ideal if is_ideal(name) else rows).append(cells)
    return Comparison(headers, rows, ideal)


def fmt_spread(sp: spread.Spread, kind: str) -> str:
    """A spread as "mean (min–max)", or the mean alone when there is no spread to state."""
    if sp.n <= 1 or sp.lo == sp.hi:
        return fmt(sp.mean, kind)
    if kind == "ratio":
        return f"{fmt(sp.mean, kind)} ({sp.lo:,.2f}–{sp.hi:,.2f})"
    return f"{fmt(sp.mean, kind)} ({fmt(sp.lo, kind)}–{fmt(sp.hi, kind)})"


def verdict_seeds(
    per_seed: Sequence[Mapping[str, Mapping[str, float]]], reference: str = REFERENCE
) -> str:
    """Over several seeds: the reference against the best other non-ideal scheme on P99 TTFT
    and on throughput, each ratio's mean (min–max) and its verdict (``sim.spread.verdict``)."""
    if not any(reference in s for s in per_seed):
        return ""
    parts: list[str] = []
    for field, label in (("ttft_p99_ms", "P99 TTFT"), ("throughput_tok_s", "throughput")):
        best = spread.best_other(
            list(per_seed),
            field,
            reference,
            skip=[n for s in per_seed for n in s if not in_verdict(n)],
        )
        if best is None:
            continue
        r = spread.ratio_spread(per_seed, best, field, reference)
        word = spread.verdict(r, spread.LOWER_IS_BETTER[field])
        parts.append(f"{label} vs best other {best}: {fmt_spread(r, 'ratio')} ours, {word}")
    if not parts:
        return ""
    if reference != BOUND and all(BOUND in s and reference in s for s in per_seed):
        r = spread.ratio_spread(per_seed, reference, "ttft_p99_ms", BOUND)
        parts.append(f"headroom: P99 TTFT ours ÷ {BOUND} {fmt_spread(r, 'ratio')}")
    return f"{reference} over {len(per_seed)} seed(s): " + "; ".join(parts)


def verdict(summaries: Mapping[str, Mapping[str, float]], reference: str = REFERENCE) -> str:
    """Does ``reference`` have the lowest P99 TTFT and the highest throughput (2% slack) of the
    non-ideal schemes? One line saying so, naming the best other scheme on each. The P99 contest
    leaves out schemes that failed more requests than the reference (named in the line)."""
    ref = summaries.get(reference)
    others = {k: v for k, v in summaries.items() if k != reference and in_verdict(k)}
    if ref is None or not others:
        return ""
    # A P99 over the completed requests only: a scheme that failed more requests than the
    # reference dropped its slowest ones, and its P99 is not comparable (it is still in the table)
    ref_failed = _finite(ref.get("failed"), 0.0)
    p99_pool = {k: v for k, v in others.items() if _finite(v.get("failed"), 0.0) <= ref_failed}
    dropped = sorted(set(others) - set(p99_pool))
    if not p99_pool:
        return ""
    best_p99 = min(p99_pool, key=lambda k: _finite(p99_pool[k].get("ttft_p99_ms"), math.inf))
    best_tput = max(others, key=lambda k: _finite(others[k].get("throughput_tok_s"), 0.0))
    p99_ratio = _ratio(others[best_p99].get("ttft_p99_ms"), ref.get("ttft_p99_ms"))
    tput_ratio = _ratio(others[best_tput].get("throughput_tok_s"), ref.get("throughput_tok_s"))
    p99_ok = p99_ratio >= 1.0
    tput_ok = tput_ratio <= 1.0 + THROUGHPUT_SLACK
    left_out = f"; left out, more failed requests: {', '.join(dropped)}" if dropped else ""
    return (
        f"{reference}: lowest P99 TTFT {'yes' if p99_ok else 'NO'} (best other {best_p99}, "
        f"{fmt(p99_ratio, 'ratio')} ours{left_out}); highest throughput "
        f"{'yes' if tput_ok else 'NO'} (best other {best_tput}, {fmt(tput_ratio, 'ratio')} ours; "
        "2% slack)"
    )


def markdown(table: Comparison) -> str:
    """The comparison as a Markdown table (ideal rows last, in italics)."""
    right = "| --- |" + " ---: |" * (len(table.headers) - 1)
    lines = ["| " + " | ".join(table.headers) + " |", right]
    lines += ["| " + " | ".join(r) + " |" for r in table.rows]
    lines += ["| " + " | ".join([f"*{r[0]}*", *r[1:]]) + " |" for r in table.ideal_rows]
    return "\n".join(lines)


def rich_table(table: Comparison, title: str) -> Any:
    """The comparison as a ``rich.table.Table`` (ideal rows after a section line, dimmed), the
    way ``kvcompass sim`` and ``kvcompass demo`` print it."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for i, h in enumerate(table.headers):
        t.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for row in table.rows:
        t.add_row(*row)
    if table.ideal_rows:
        t.add_section()
        for row in table.ideal_rows:
            t.add_row(f"{row[0]} (reference)", *row[1:], style="dim")
    return t


def _finite(value: float | None, otherwise: float) -> float:
    """``value``, or ``otherwise`` when it is missing or NaN (a scheme that completed nothing
    has no P99: it must never be the best other, whatever its place in the table)."""
    if value is None or not math.isfinite(float(value)):
        return otherwise
    return float(value)


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or not b or not math.isfinite(float(b)):
        return math.nan
    return float(a) / float(b)


def results_markdown(doc: Mapping[str, object]) -> str:
    """Every run set of a results document (``sim.experiment.results_json``) as Markdown: a
    heading per rate (and knob value), the comparison table, the verdict line (over several
    seeds: the spreads, the verdict columns and ``verdict_seeds``)."""
    runs = doc.get("runs")
    out: list[str] = []
    for run in runs if isinstance(runs, list) else []:
        title = f"rate {float(run['rate']):,g}/s"
        if run.get("knob"):
            title += f", {run['knob']}={float(run['value']):g}"
        summaries = run["schemes"]
        per_seed = list((run.get("per_seed") or {}).values())
        if len(per_seed) > 1:  # several seeds: spreads and the spread verdicts
            title += f", {len(per_seed)} seeds"
            table, line = comparison_seeds(per_seed), verdict_seeds(per_seed)
        else:
            table, line = comparison(summaries), verdict(summaries)
        out += [f"#### {doc.get('workload', '')} — {title}", "", markdown(table)]
        if line:
            out += ["", line]
        out.append("")
    return "\n".join(out)
