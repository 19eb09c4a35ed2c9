"""Vectorised sampling and CSR-building helpers shared by the workload generators.

Owns: Poisson arrivals, length distributions given by a published mean and spread, Zipf
popularity, region weights, and assembling prompts from contiguous block-id ranges. Every
function takes its ``numpy.random.Generator``; nothing here holds random state or loops over
tokens in Python.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError


def check_common(n_requests: int, rate_per_s: float, n_regions: int) -> None:
    """Validate the arguments every ``make_<name>`` generator takes."""
    if not isinstance(n_requests, int | np.integer) or n_requests < 0:
        raise InvalidInputError(f"n_requests: expected an int >= 0, got {n_requests!r}")
    if not (isinstance(rate_per_s, int | float) and np.isfinite(rate_per_s) and rate_per_s > 0):
        raise InvalidInputError(f"rate_per_s: expected a finite number > 0, got {rate_per_s!r}")
    if not isinstance(n_regions, int | np.integer) or n_regions < 1:
        raise InvalidInputError(f"n_regions: expected an int >= 1, got {n_regions!r}")


def check_block_tokens(block_tokens: object) -> int:
    """The ``block_tokens`` every generator takes: a positive int."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int | np.integer):
        raise InvalidInputError(f"block_tokens: expected an int >= 1, got {block_tokens!r}")
    if block_tokens < 1:
        raise InvalidInputError(f"block_tokens: expected an int >= 1, got {block_tokens!r}")
    return int(block_tokens)


def region_probabilities(
    n_regions: int, region_weights: NDArray[np.float64] | None
) -> NDArray[np.float64]:
    """Normalised region weights; ``None`` means uniform (callers pass worker counts or
    :func:`sim.workloads.regions.population_weights` to get anything else)."""
    if region_weights is None:
        return np.full(n_regions, 1.0 / n_regions)
    w = np.asarray(region_weights, dtype=np.float64)
    if w.shape != (n_regions,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidInputError(
            f"region_weights: expected {n_regions} finite non-negative weights with a positive "
            f"sum, got {np.asarray(region_weights)!r:.120}"
        )
    return np.asarray(w / w.sum(), dtype=np.float64)


def poisson_arrivals_ms(n: int, rate_per_s: float, rng: np.random.Generator) -> NDArray[np.float64]:
    """``n`` arrival times (ms) of a Poisson process at ``rate_per_s``, starting after one gap."""
    gaps = rng.exponential(1000.0 / rate_per_s, size=n)
    return np.cumsum(gaps)


def lognormal_mean_sd(
    mean: float, sd: float, size: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """Log-normal samples with the given arithmetic mean and standard deviation.

    Published dataset statistics are usually a mean ± sd; a log-normal with those two moments
    (sigma^2 = ln(1 + sd^2/mean^2), mu = ln(mean) - sigma^2/2) keeps the heavy right tail that
    token-length distributions have.
    """
    sigma2 = np.log1p((sd / mean) ** 2)
    mu = np.log(mean) - sigma2 / 2.0
    return rng.lognormal(mu, np.sqrt(sigma2), size=size)


def lognormal_median(
    median: float, sigma: float, size: int, rng: np.random.Generator
) -> NDArray[np.float64]:
    """Log-normal samples with the given median and log-space sigma."""
    return rng.lognormal(np.log(median), sigma, size=size)


def int_lengths(x: NDArray[np.float64], lo: int, hi: int) -> NDArray[np.int64]:
    """Round samples to integer token counts clipped to ``[lo, hi]``."""
    return np.clip(np.rint(x), lo, hi).astype(np.int64)


def round_up(x: NDArray[np.int64], multiple: int) -> NDArray[np.int64]:
    """Round token counts up to a multiple (shared segments must be whole blocks)."""
    return np.asarray(-(-x // multiple) * multiple, dtype=np.int64)


def zipf_probabilities(n_items: int, s: float) -> NDArray[np.float64]:
    """Zipf popularity: item k (0 = most popular) has probability proportional to (k+1)^-s."""
    p = np.arange(1, n_items + 1, dtype=np.float64) ** (-s)
    return np.asarray(p / p.sum(), dtype=np.float64)


def zipf_choice(n_items: int, s: float, size: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """Draw ``size`` item indices with Zipf popularity (inverse-CDF search, O(size log n))."""
    cdf = np.cumsum(zipf_probabilities(n_items, s))
    idx = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
    return np.asarray(np.minimum(idx, n_items - 1), dtype=np.int64)


@njit(cache=True)
def _fill_ranges(
    starts: NDArray[np.int64], counts: NDArray[np.int64], out: NDArray[np.int64]
) -> None:
    k = 0
    for r in range(starts.shape[0]):
        s = starts[r]
        for j in range(counts[r]):
            out[k] = s + j
            k += 1


def concat_ranges(
    starts: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """CSR of rows that are concatenations of contiguous id ranges.

    ``starts`` and ``counts`` have shape (n, S): row i is ``range(starts[i,0], +counts[i,0])``
    followed by ``range(starts[i,1], +counts[i,1])`` and so on. Returns ``(values, offsets)``
    with ``offsets`` of shape (n+1,). One numba pass (``np.repeat`` + ``arange`` is 10x slower
    at tens of millions of ids); twin: ``tests/naive.py::concat_ranges_naive``.
    """
    if starts.shape != counts.shape or starts.ndim != 2:
        raise InvalidInputError(
            f"starts/counts: expected equal (n, S) shapes, got {starts.shape} and {counts.shape}"
        )
    c = np.ascontiguousarray(counts.reshape(-1), dtype=np.int64)
    if c.size and int(c.min()) < 0:
        raise InvalidInputError(f"counts: expected >= 0, got min {int(c.min())}")
    values = np.empty(int(c.sum()), dtype=np.int64)
    _fill_ranges(np.ascontiguousarray(starts.reshape(-1), dtype=np.int64), c, values)
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts.sum(axis=1), out=offsets[1:])
    return values, offsets


def fresh_ranges(counts: NDArray[np.int64], first_id: int) -> NDArray[np.int64]:
    """Start ids of consecutive, disjoint ranges of the given sizes beginning at ``first_id``."""
    return np.asarray(first_id + np.cumsum(counts) - counts, dtype=np.int64)
