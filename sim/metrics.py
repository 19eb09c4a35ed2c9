"""What a run reports: latency percentiles, throughput, load factor, reuse, false hits.

Owns the per-request record of a run (``Record``: struct of arrays filled by the runner) and the
summary computed from it. Must not simulate anything.

Definitions
-----------
* TTFT / E2E: see ``sim.cost`` (both include the WAN round trip to the serving worker).
* ``throughput_tok_s``: prompt + output tokens of all requests / (last first token - first
  arrival), i.e. over the makespan of the contended resource, the prefill queues. Under an
  open-loop replay it equals the offered token rate until the pool saturates, after which the
  makespan stretches and it drops. The decode tail is left out on purpose: decode is modelled
  as an uncontended continuous batch (``sim.cost``), so the last request's long output would only
  measure its length, not the scheme.
* Load factor (paper Fig. 14): per whole time bin (``load_bin_ms``, by arrival at the worker), each
  worker's GPU time (prefill + reload + migration recompute) divided by the mean over all
  workers in that bin; a worker's time-averaged factor is its mean over bins with any load;
  ``peak_load_factor`` is the largest time-averaged factor.
* ``hit_rate``: reused prefill tokens / prompt tokens (token hit rate); ``request_hit_rate``:
  share of requests that reused anything.
* ``false_hit_rate``: share of requests whose chosen worker reused fewer tokens than the scheme
  claimed it held (paper §5.8's end-to-end false lookup), over all requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(slots=True)
class Record:
    """Per-request outcomes (NaN / -1 until the request is served)."""

    worker: NDArray[np.int64]
    arrive_worker_ms: NDArray[np.float64]
    ttft_ms: NDArray[np.float64]
    e2e_ms: NDArray[np.float64]
    done_ms: NDArray[np.float64]
    reused: NDArray[np.int64]
    claimed: NDArray[np.int64]
    service_ms: NDArray[np.float64]
    queue_ms: NDArray[np.float64]

    @classmethod
    def empty(cls, n: int) -> Record:
        nan = np.full(n, np.nan)
        return cls(
            worker=np.full(n, -1, dtype=np.int64),
            arrive_worker_ms=nan.copy(),
            ttft_ms=nan.copy(),
            e2e_ms=nan.copy(),
            done_ms=nan.copy(),
            reused=np.zeros(n, dtype=np.int64),
            claimed=np.zeros(n, dtype=np.int64),
            service_ms=nan.copy(),
            queue_ms=nan.copy(),
        )


def load_factor_matrix(
    worker: NDArray[np.int64],
    at_ms: NDArray[np.float64],
    gpu_ms: NDArray[np.float64],
    n_workers: int,
    bin_ms: float,
) -> NDArray[np.float64]:
    """(bins, W) load factor: GPU time sent to each worker per bin / the bin's mean over workers.

    Bins where no work arrived are NaN.
    """
    ok = (worker >= 0) & np.isfinite(at_ms) & np.isfinite(gpu_ms)
    if not ok.any():
        return np.zeros((0, n_workers))
    t0 = float(at_ms[ok].min())
    b = ((at_ms[ok] - t0) // bin_ms).astype(np.int64)
    # Only whole bins: the last, partial one holds a handful of requests and would measure noise.
    n_bins = max(1, int((float(at_ms[ok].max()) - t0) // bin_ms))
    keep = b < n_bins
    load = np.zeros((n_bins, n_workers))
    np.add.at(load, (b[keep], worker[ok][keep]), gpu_ms[ok][keep])
    mean = load.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        factor = np.where(mean > 0, load / mean, np.nan)
    return factor


def peak_load_factor(factor: NDArray[np.float64]) -> float:
    """The hottest worker's time-averaged load factor (paper Fig. 14's "peak")."""
    if factor.size == 0 or np.isnan(factor).all():
        return float("nan")
    return float(np.nanmax(np.nanmean(factor, axis=0)))


def summarize(
    rec: Record,
    arrival_ms: NDArray[np.float64],
    prompt_len: NDArray[np.int64],
    output_len: NDArray[np.int64],
    n_workers: int,
    bin_ms: float,
    extra_gpu: tuple[NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]] | None = None,
) -> dict[str, float]:
    """The headline numbers of one run (the JSON contract's fields and a few more)."""
    done = np.isfinite(rec.ttft_ms)
    n_done = int(done.sum())
    out: dict[str, float] = {"requests": float(len(arrival_ms)), "completed": float(n_done)}
    if n_done == 0:
        return out
    ttft, e2e = rec.ttft_ms[done], rec.e2e_ms[done]
    prompt_tokens = int(prompt_len[done].sum())
    reused = int(rec.reused[done].sum())
    first_token = arrival_ms[done] + ttft
    span_s = (float(first_token.max()) - float(arrival_ms[0])) / 1e3
    w, at, gpu = rec.worker, rec.arrive_worker_ms, rec.service_ms
    if extra_gpu is not None and extra_gpu[0].size:
        w = np.concatenate([w, extra_gpu[0]])
        at = np.concatenate([at, extra_gpu[1]])
        gpu = np.concatenate([gpu, extra_gpu[2]])
    factor = load_factor_matrix(w, at, gpu, n_workers, bin_ms)
    out.update(
        ttft_p50_ms=float(np.percentile(ttft, 50)),
        ttft_p99_ms=float(np.percentile(ttft, 99)),
        ttft_mean_ms=float(ttft.mean()),
        e2e_p50_ms=float(np.percentile(e2e, 50)),
        e2e_p99_ms=float(np.percentile(e2e, 99)),
        queue_mean_ms=float(np.nanmean(rec.queue_ms[done])),
        throughput_tok_s=float(prompt_tokens + int(output_len[done].sum())) / max(span_s, 1e-9),
        peak_load_factor=peak_load_factor(factor),
        hit_rate=reused / max(prompt_tokens, 1),
        request_hit_rate=float((rec.reused[done] > 0).mean()),
        reused_tokens=float(reused),
        recomputed_tokens=float(prompt_tokens - reused),
        false_hit_rate=float((rec.claimed[done] > rec.reused[done]).mean()),
        claimed_requests=float((rec.claimed[done] > 0).sum()),
    )
    return out


def load_factor(rec: Record, n_workers: int, bin_ms: float) -> NDArray[np.float64]:
    """The (bins, W) load-factor matrix of a run (for the heatmap)."""
    return load_factor_matrix(rec.worker, rec.arrive_worker_ms, rec.service_ms, n_workers, bin_ms)
