"""What a run reports: latency percentiles, throughput, load factor, reuse, false hits.

Owns the per-request record of a run (``Record``: struct of arrays filled by the runner) and the
summary computed from it. Must not simulate anything.

Every key, its unit and meaning are defined once in ``kvcompass.metrics`` (shared with the
end-to-end report); this module adds only what a simulator alone knows and how it bins it:

* TTFT / E2E: see ``sim.cost`` (both include the WAN round trip to the serving worker).
* Load factor (paper Fig. 14): per whole time bin (``load_bin_ms``, by arrival at the worker), each
  worker's GPU time (prefill + reload + migration recompute) divided by the mean over all
  workers in that bin; a worker's time-averaged factor is its mean over bins with any load;
  ``peak_load_factor`` is the largest time-averaged factor.
* ``false_hit_rate``: over completed requests (paper §5.8's end-to-end false lookup).
* ``throughput_tok_s`` leaves the decode tail out because decode is modelled as an uncontended
  continuous batch (``sim.cost``): under an open-loop replay it equals the offered token rate
  until the pool saturates, after which the prefill makespan stretches and it drops.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

import numpy as np
from numpy.typing import NDArray

from kvcompass.metrics import serving_summary


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

    def digest(self) -> str:
        """SHA-256 of every field's bytes, in field order: two runs with the same digest served
        every request identically (how speed work and ``--jobs`` prove results unchanged)."""
        h = hashlib.sha256()
        for f in fields(self):
            a = np.ascontiguousarray(getattr(self, f.name))
            h.update(f.name.encode())
            h.update(str(a.dtype).encode())
            h.update(a.tobytes())
        return h.hexdigest()


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
    *,
    remote: NDArray[np.bool_] | None = None,
) -> dict[str, float]:
    """The headline numbers of one run: ``kvcompass.metrics.serving_summary`` plus the sim's own.

    ``remote``: which requests were served outside their origin region (cross-region keys).
    """
    done = np.isfinite(rec.ttft_ms)
    out = serving_summary(
        done, arrival_ms, rec.ttft_ms, rec.e2e_ms, prompt_len, rec.reused, output_len, remote
    )
    if not done.any():
        return out
    w, at, gpu = rec.worker, rec.arrive_worker_ms, rec.service_ms
    if extra_gpu is not None and extra_gpu[0].size:
        w = np.concatenate([w, extra_gpu[0]])
        at = np.concatenate([at, extra_gpu[1]])
        gpu = np.concatenate([gpu, extra_gpu[2]])
    factor = load_factor_matrix(w, at, gpu, n_workers, bin_ms)
    out.update(
        queue_mean_ms=float(np.nanmean(rec.queue_ms[done])),
        peak_load_factor=peak_load_factor(factor),
        false_hit_rate=float((rec.claimed[done] > rec.reused[done]).mean()),
        claimed_requests=float((rec.claimed[done] > 0).sum()),
    )
    return out


def load_factor(rec: Record, n_workers: int, bin_ms: float) -> NDArray[np.float64]:
    """The (bins, W) load-factor matrix of a run (for the heatmap)."""
    return load_factor_matrix(rec.worker, rec.arrive_worker_ms, rec.service_ms, n_workers, bin_ms)
