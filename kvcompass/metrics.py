"""The figures every run reports: one name, one unit, one meaning for the simulator and the demo.

Owns the definition of the serving metrics that ``sim.metrics.summarize`` (simulated requests) and
``e2e.report.summarise`` (real requests through the edges) both print, and the one function that
computes them from per-request arrays, so a ``hit_rate`` in a simulator JSON and in the demo's
table are the same quantity (STYLE.md 16). ``METRICS`` lists every key either summary emits, with
its unit and meaning; the simulator-only keys (load factor, false hits) are computed in
``sim.metrics`` but named here too. Must not know where the arrays came from: no simulator, HTTP
or clock.

Over completed requests only (a request that never produced a first token has no latency and
reuses nothing); ``failed`` counts the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True, slots=True)
class Metric:
    """One reported figure: its key in every summary dict and JSON, unit and meaning."""

    name: str
    unit: str
    meaning: str
    sim_only: bool = False
    """Computed by ``sim.metrics`` alone (needs what only a simulator knows)."""


METRICS: tuple[Metric, ...] = (
    Metric("requests", "requests", "requests offered"),
    Metric("completed", "requests", "requests that produced a first token (HTTP 200 in e2e)"),
    Metric("failed", "requests", "requests - completed"),
    Metric("ttft_p50_ms", "ms", "median time to first token, arrival at the edge to first token"),
    Metric("ttft_p99_ms", "ms", "99th percentile of TTFT"),
    Metric("ttft_mean_ms", "ms", "mean TTFT"),
    Metric("e2e_p50_ms", "ms", "median end-to-end latency, arrival to last token"),
    Metric("e2e_p99_ms", "ms", "99th percentile of end-to-end latency"),
    Metric(
        "throughput_tok_s",
        "tokens/s",
        "(prompt + output tokens) / (last first token - first arrival): the makespan of the"
        " prefill queues, the contended resource; the decode tail after the last first token is"
        " left out (it measures the last output's length, not the routing)",
    ),
    Metric("hit_rate", "fraction", "token hit rate: reused prefill tokens / prompt tokens"),
    Metric("request_hit_rate", "fraction", "share of requests that reused at least one token"),
    Metric("reused_tokens", "tokens", "prompt tokens served from a cache (summed)"),
    Metric("recomputed_tokens", "tokens", "prompt tokens prefilled (prompt - reused, summed)"),
    Metric(
        "cross_region_share",
        "fraction",
        "share of requests served by a worker outside the request's origin region",
    ),
    Metric(
        "cross_region_reuse_requests",
        "requests",
        "count of requests served outside their origin region that reused a cache there",
    ),
    Metric("queue_mean_ms", "ms", "mean wait in the serving worker's queue", sim_only=True),
    Metric(
        "peak_load_factor",
        "ratio",
        "the hottest worker's time-averaged GPU time / the mean over workers (paper Fig. 14);"
        " binning in sim.metrics",
        sim_only=True,
    ),
    Metric(
        "false_hit_rate",
        "fraction",
        "share of requests whose worker reused fewer tokens than the scheme claimed",
        sim_only=True,
    ),
    Metric("claimed_requests", "requests", "requests routed on a claimed hit", sim_only=True),
)
"""Every key the summaries emit, in report order."""

SERVING_KEYS: tuple[str, ...] = tuple(m.name for m in METRICS if not m.sim_only)
"""The keys ``serving_summary`` returns (the others are the simulator's own)."""


def serving_summary(
    completed: NDArray[np.bool_],
    arrival_ms: NDArray[np.float64],
    ttft_ms: NDArray[np.float64],
    e2e_ms: NDArray[np.float64],
    prompt_tokens: NDArray[np.int64],
    reused_tokens: NDArray[np.int64],
    output_tokens: NDArray[np.int64],
    remote: NDArray[np.bool_] | None = None,
) -> dict[str, float]:
    """The shared figures of one run (``SERVING_KEYS``; meanings in ``METRICS``).

    Every array has one entry per offered request; ``completed`` selects the served ones,
    ``reused_tokens`` must be >= 0 where completed, ``remote`` says which were served outside
    their origin region (the cross-region keys are NaN without it). With no completed request
    every figure but the counts is NaN.
    """
    n = len(completed)
    done = np.asarray(completed, dtype=np.bool_)
    n_done = int(done.sum())
    out: dict[str, float] = {k: float("nan") for k in SERVING_KEYS}
    out.update(requests=float(n), completed=float(n_done), failed=float(n - n_done))
    if n_done == 0:
        return out
    ttft, e2e = ttft_ms[done], e2e_ms[done]
    prompt = int(prompt_tokens[done].sum())
    reused_each = reused_tokens[done]
    reused = int(reused_each.sum())
    span_s = (float((arrival_ms[done] + ttft).max()) - float(arrival_ms.min())) / 1e3
    out.update(
        ttft_p50_ms=float(np.percentile(ttft, 50)),
        ttft_p99_ms=float(np.percentile(ttft, 99)),
        ttft_mean_ms=float(ttft.mean()),
        e2e_p50_ms=float(np.percentile(e2e, 50)),
        e2e_p99_ms=float(np.percentile(e2e, 99)),
        throughput_tok_s=float(prompt + int(output_tokens[done].sum())) / max(span_s, 1e-9),
        hit_rate=reused / max(prompt, 1),
        request_hit_rate=float((reused_each > 0).mean()),
        reused_tokens=float(reused),
        recomputed_tokens=float(prompt - reused),
    )
    if remote is not None:
        far = np.asarray(remote, dtype=np.bool_)[done]
        out.update(
            cross_region_share=float(far.mean()),
            cross_region_reuse_requests=float((far & (reused_each > 0)).sum()),
        )
    return out
