"""The Burst workload: requests sharing a *new* long prefix arrive from every region at once.

Owns ``make_burst`` and ``BurstParams``. Must not read datasets. The shape is the case one edge
alone gets wrong (issue 25): when the burst comes every edge sees the same one holder, and inside
the burst no edge can hear of another's forwards (the window is shorter than any inter-region
WAN one-way), so edges that decide alone all send their share to that holder and queue there;
the owning region's edge, which sees every request bound for its workers (route-and-reserve,
``RouterConfig.booking``), can spread them.

Prompt layout (ids prefix-closed)::

    [burst b's prefix: prefix_tokens, new ids per burst][suffix: fresh per request]

Arrivals: burst b starts at ``b * per_burst / rate`` s (so the mean rate is ``rate_per_s``) with
one request alone (it puts the prefix at one worker), the other ``per_burst - 1`` follow
``lead_ms`` later, uniform over ``window_ms``; origins drawn by the region weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from sim.workloads.regions import assign_regions
from sim.workloads.sampling import (
    check_block_tokens,
    check_common,
    concat_ranges,
    fresh_ranges,
    region_probabilities,
)
from sim.workloads.workload import Kind, Workload


@dataclass(frozen=True, slots=True)
class BurstParams:
    """The numbers of the Burst workload, each with where it comes from."""

    prefix_tokens: int = 8192
    """A long shared prefix (a document or an agent's long system prompt; the Mixed workload's
    LooGLE documents have this median): its prefill, 8,192 × β (≈ 0.7 s at the paper testbed's
    0.085 ms/token), is over twice the longest WAN round trip (320 ms), so a region without it
    gains by forwarding to a holder: every edge wants the same few workers."""
    suffix_min_tokens: int = 512
    suffix_max_tokens: int = 2048
    """Each request's own part (a question with its context): uniform. Its prefill (45–175 ms)
    is what a herd queues behind at one holder; a few such requests queued cost more than a WAN
    hop, which is when spreading the burst pays."""
    per_burst: int = 24
    """Requests of one burst, over every region: twice the 12 in-flight requests a region of the
    paper testbed's smaller sizes (2–4 workers) absorbs without queueing behind one prefill."""
    lead_ms: float = 1500.0
    """A burst's first request comes alone, this long before the rest: the prefix's prefill
    (≈ 0.7 s), the index pipeline (≈ 60 ms) and the longest WAN one-way (160 ms) with margin, so
    when the rest arrive every edge's view shows the same one holder. 0: no lead (nobody holds
    the prefix when the burst arrives)."""
    window_ms: float = 100.0
    """A burst's arrivals spread uniformly over this: shorter than the shortest inter-region WAN
    one-way of the built-in deployments (126 ms), so no edge hears another's forwards within it."""
    output_tokens: int = 16

    def __post_init__(self) -> None:
        for name in ("prefix_tokens", "suffix_min_tokens", "per_burst", "output_tokens"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.suffix_max_tokens < self.suffix_min_tokens:
            raise InvalidInputError(
                f"suffix_max_tokens: expected >= suffix_min_tokens ({self.suffix_min_tokens}), "
                f"got {self.suffix_max_tokens}"
            )
        for name in ("lead_ms", "window_ms"):
            if not getattr(self, name) >= 0:
                raise InvalidInputError(f"{name}: expected >= 0, got {getattr(self, name)}")


def make_burst(
    n_requests: int,
    rate_per_s: float,
    n_regions: int,
    region_weights: NDArray[np.float64] | None,
    rng: np.random.Generator,
    *,
    block_tokens: int = 16,
    params: BurstParams | None = None,
) -> Workload:
    """``n_requests`` Burst requests at a mean ``rate_per_s``; kind ``Kind.BURST``, tenant 0."""
    check_common(n_requests, rate_per_s, n_regions)
    p = params if params is not None else BurstParams()
    bt = check_block_tokens(block_tokens)
    n = int(n_requests)
    probs = region_probabilities(n_regions, region_weights)
    burst = np.arange(n, dtype=np.int64) // p.per_burst
    n_bursts = int(burst[-1]) + 1 if n else 0
    period_ms = p.per_burst * 1000.0 / rate_per_s
    first = np.arange(n, dtype=np.int64) % p.per_burst == 0
    offset = np.where(first, 0.0, p.lead_ms + rng.uniform(0.0, p.window_ms, n))
    arrival = burst * period_ms + offset
    order = np.argsort(arrival, kind="stable")  # bursts overlap when the period is short
    arrival, burst = arrival[order], burst[order]
    prefix_b = -(-p.prefix_tokens // bt)
    tail = rng.integers(p.suffix_min_tokens, p.suffix_max_tokens + 1, n).astype(np.int64)
    starts = np.zeros((n, 2), dtype=np.int64)
    counts = np.zeros((n, 2), dtype=np.int64)
    starts[:, 0], counts[:, 0] = burst * prefix_b, prefix_b
    counts[:, 1] = -(-tail // bt)
    starts[:, 1] = fresh_ranges(counts[:, 1], n_bursts * prefix_b)
    block_ids, block_offsets = concat_ranges(starts, counts)
    return Workload(
        name="burst",
        block_tokens=bt,
        arrival_ms=np.asarray(arrival, dtype=np.float64),
        origin_region=assign_regions(n, probs, rng),
        prompt_len=prefix_b * bt + tail,
        output_len=np.full(n, p.output_tokens, dtype=np.int64),
        block_ids=block_ids,
        block_offsets=block_offsets,
        tenant=np.zeros(n, dtype=np.int32),
        kind=np.full(n, Kind.BURST, dtype=np.int8),
    )
