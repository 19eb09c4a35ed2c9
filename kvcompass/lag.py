"""Latency histograms of the data path (pure): where an event's time goes, and how late the
index is.

Owns ``LagHistogram``: counts of millisecond latencies in fixed buckets (``BOUNDS_MS``, from
0.25 ms to 60 s, about 12% apart, so a quantile read back is within ~12% of the true one),
filled in bulk with numpy (one call per take or per applied batch, no lock: one writer), read as
quantiles and exported by the shells as Prometheus histograms (cumulative counts at the same
bounds). The pipeline worker keeps one per hop (``pipeline.shell``); every view keeps the
event -> view lag of what it applies (``wire.patch_follower``), and the decider's pending-holder
overlay takes its index allowance from that lag (``kvcompass.decider``), so the allowance is
measured, not assumed.

Must not: read a clock (values come in as milliseconds).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

BOUNDS_MS: NDArray[np.float64] = np.round(np.geomspace(0.25, 60_000.0, 108), 3)
"""Upper bounds of the buckets, ms (the last bucket, above 60 s, is open)."""


class LagHistogram:
    """Counts of latencies (ms) per bucket of ``BOUNDS_MS``, plus their sum and maximum."""

    __slots__ = ("counts", "max_ms", "sum_ms")

    def __init__(self) -> None:
        self.counts = np.zeros(BOUNDS_MS.size + 1, np.int64)
        self.sum_ms = 0.0
        self.max_ms = 0.0

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def observe(self, values_ms: ArrayLike, weight: int = 1) -> None:
        """Add latencies (negative ones, from clocks that disagree, count as 0)."""
        v = np.maximum(np.asarray(values_ms, np.float64).ravel(), 0.0)
        if not v.size or weight < 1:
            return
        idx = np.searchsorted(BOUNDS_MS, v, side="left")
        self.counts += np.bincount(idx, minlength=self.counts.size) * weight
        self.sum_ms += float(v.sum()) * weight
        self.max_ms = max(self.max_ms, float(v.max()))

    def quantile(self, q: float) -> float:
        """The q-quantile (0 < q <= 1), ms: the upper bound of the bucket holding it (the
        maximum seen, if smaller); NaN when empty."""
        n = self.total
        if n == 0:
            return float("nan")
        rank = max(1, int(np.ceil(q * n)))
        i = int(np.searchsorted(np.cumsum(self.counts), rank, side="left"))
        bound = float(BOUNDS_MS[i]) if i < BOUNDS_MS.size else self.max_ms
        return min(bound, self.max_ms)

    def merged(self, other: LagHistogram) -> LagHistogram:
        out = LagHistogram()
        out.counts = self.counts + other.counts
        out.sum_ms = self.sum_ms + other.sum_ms
        out.max_ms = max(self.max_ms, other.max_ms)
        return out

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound ms, count <= bound)`` for every bucket, then ``(inf, total)``: the
        Prometheus histogram's buckets."""
        cum = np.cumsum(self.counts).tolist()
        out = [(float(b), int(c)) for b, c in zip(BOUNDS_MS.tolist(), cum, strict=False)]
        out.append((float("inf"), int(cum[-1])))
        return out


def quantile_from_cumulative(buckets: list[tuple[float, float]], q: float) -> float:
    """The q-quantile of a scraped Prometheus histogram (``(le, cumulative count)`` pairs, any
    unit): the upper bound of the first bucket reaching it; NaN when empty."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return float("nan")
    rank = q * total
    for le, c in buckets:
        if c >= rank:
            return le
    return buckets[-1][0]
