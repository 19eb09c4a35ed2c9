"""Several seeds, one stated spread: mean and min–max of each figure, ratios and their verdict.

Owns the one rule that calls a comparison a "win", a "loss" or "within spread" (``verdict``),
the per-scheme spread of a run set's summaries over seeds (``scheme_spread``), the ratio of each
scheme to the reference computed per seed and then spread (``ratio_spread``), and the best-other
verdict line. ``kvcompass sim --seeds`` and ``bench/sim_seeds.py`` both aggregate through this
module. Must not run simulations, print or format tables (``sim.tables`` lays them out).

Ratios are other ÷ reference, per seed (both schemes saw the same requests and network draws of
that seed), so for P99 TTFT a ratio above 1 is the reference's win and for throughput a ratio
below 1 is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

WITHIN = 0.05
"""A ratio whose mean is within 5% of 1.0 is "within spread" whatever its min–max."""

Verdict = Literal["win", "loss", "within spread", "—"]

LOWER_IS_BETTER: dict[str, bool] = {"ttft_p99_ms": True, "throughput_tok_s": False}
"""The figures a verdict is given on, and which direction is better."""


@dataclass(frozen=True, slots=True)
class Spread:
    """Mean and min–max of one figure over seeds (NaN values left out; ``n`` counts the rest)."""

    mean: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
        if not xs:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(sum(xs) / len(xs), min(xs), max(xs), len(xs))

    def to_json(self) -> dict[str, float]:
        return {"mean": self.mean, "min": self.lo, "max": self.hi, "n": float(self.n)}


def verdict(ratio: Spread, lower_is_better: bool) -> Verdict:
    """The reference's verdict against a scheme from the spread of other ÷ reference.

    "within spread" when the min–max interval holds 1.0 or the mean is within ``WITHIN`` of it;
    otherwise "win" when the reference is better on the mean (a ratio above 1 for a figure
    where lower is better, below 1 where higher is), else "loss"; "—" without a finite ratio.
    """
    if ratio.n == 0 or not math.isfinite(ratio.mean):
        return "—"
    if ratio.lo <= 1.0 <= ratio.hi or abs(ratio.mean - 1.0) <= WITHIN:
        return "within spread"
    ours_better = ratio.mean > 1.0 if lower_is_better else ratio.mean < 1.0
    return "win" if ours_better else "loss"


Summaries = Mapping[str, Mapping[str, float]]
"""One seed's run set: scheme name -> summary (``sim.runner.RunResult.summary``)."""


def _ratio(a: float | None, b: float | None) -> float:
    if a is None or b is None or not math.isfinite(float(b)) or float(b) == 0.0:
        return math.nan
    return float(a) / float(b)


def scheme_spread(per_seed: Iterable[Summaries]) -> dict[str, dict[str, Spread]]:
    """Every scheme's every numeric field as a spread over the seeds that ran it."""
    values: dict[str, dict[str, list[float]]] = {}
    for summaries in per_seed:
        for name, s in summaries.items():
            row = values.setdefault(name, {})
            for field, v in s.items():
                if isinstance(v, (int, float)):
                    row.setdefault(field, []).append(float(v))
    return {n: {f: Spread.of(xs) for f, xs in row.items()} for n, row in values.items()}


def ratio_spread(per_seed: Iterable[Summaries], scheme: str, field: str, reference: str) -> Spread:
    """``scheme``'s ``field`` ÷ ``reference``'s, per seed, as a spread."""
    return Spread.of(
        _ratio(s[scheme].get(field), s[reference].get(field))
        for s in per_seed
        if scheme in s and reference in s
    )


def mean_summaries(per_seed: Iterable[Summaries]) -> dict[str, dict[str, float]]:
    """Each scheme's summary averaged field by field over the seeds (one seed: itself)."""
    return {
        name: {f: sp.mean for f, sp in row.items()} for name, row in scheme_spread(per_seed).items()
    }


def best_other(
    per_seed: Iterable[Summaries], field: str, reference: str, skip: Iterable[str] = ()
) -> str | None:
    """The non-reference scheme (outside ``skip``) with the best mean ``field``."""
    lower = LOWER_IS_BETTER[field]
    means: dict[str, float] = {}
    skipped = set(skip)
    for name, row in scheme_spread(list(per_seed)).items():
        if name == reference or name in skipped or field not in row:
            continue
        m = row[field].mean
        if math.isfinite(m):
            means[name] = m
    if not means:
        return None
    return (min if lower else max)(means, key=lambda n: means[n])
