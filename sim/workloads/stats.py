"""Prefix-sharing statistics of a workload with an infinite cache (paper §2.1, Fig. 2/3, App. D).

Owns ``sharing_stats``: how much of a workload's prompt volume an infinite, instantly shared
cache could reuse, and how much of that reuse crosses regions. Used to calibrate and to check
the generators (tests, README figures); not used by the simulator's hot path. Must not mutate
the workload.

Definitions (block granularity; valid because built-in workloads keep block ids prefix-closed,
so a block seen before means its whole prefix was seen before):

- a block occurrence is *reused* if the same block id occurred in an earlier request; its volume
  is the tokens it contributes to its request (``block_tokens``, less for a truncated last
  block). Reused occurrences form a leading run of each request.
- *cross-region* reuse (Fig. 3): reused volume on blocks whose requests come from at least two
  regions over the whole workload.
- *remote-only* reuse (Fig. 2 / 19): reused volume whose block had, at that moment, been seen
  only in other regions (a router that sees only its own region must recompute it).
- ``min_prefix_tokens``: count a request's reuse only if its reused prefix has at least this many
  tokens (the paper's figures use 512 or 1024).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.workloads.workload import Workload


@dataclass(frozen=True, slots=True)
class SharingStats:
    """Infinite-cache reuse figures of one workload (token volumes)."""

    prompt_tokens: int
    reused_tokens: int
    cross_region_tokens: int
    remote_only_tokens: int

    @property
    def hit_ratio(self) -> float:
        """Reused / all prompt tokens."""
        return self.reused_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def cross_region_share(self) -> float:
        """Share of reused volume on prefixes used from two or more regions."""
        return self.cross_region_tokens / self.reused_tokens if self.reused_tokens else 0.0

    @property
    def remote_only_share(self) -> float:
        """Share of reused volume first available only in another region."""
        return self.remote_only_tokens / self.reused_tokens if self.reused_tokens else 0.0


def _first_mask(values: np.ndarray) -> np.ndarray:
    """True at the first occurrence of each value (stable)."""
    _, first = np.unique(values, return_index=True)
    mask = np.zeros(values.shape[0], dtype=bool)
    mask[first] = True
    return mask


def _sorted_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and their counts (sort-based: numpy's hash path is slow here)."""
    s = np.sort(values)
    edge = np.flatnonzero(np.concatenate([[True], s[1:] != s[:-1], [True]]))
    return s[edge[:-1]], np.diff(edge)


def sharing_stats(w: Workload, min_prefix_tokens: int = 0) -> SharingStats:
    """Infinite-cache reuse of ``w`` in arrival order; see the module docstring."""
    n = len(w)
    counts = np.diff(w.block_offsets)
    req = np.repeat(np.arange(n, dtype=np.int64), counts)
    pos = np.arange(w.block_ids.shape[0], dtype=np.int64) - np.repeat(w.block_offsets[:-1], counts)
    vol = np.minimum(w.block_tokens, w.prompt_len[req] - pos * w.block_tokens)
    region = w.origin_region[req]
    n_regions = int(region.max()) + 1 if n else 1
    pair = w.block_ids * n_regions + region

    reused = ~_first_mask(w.block_ids)
    if min_prefix_tokens > 0:
        per_req = np.bincount(req, weights=np.where(reused, vol, 0), minlength=n)
        reused &= per_req[req] >= min_prefix_tokens
    local = ~_first_mask(pair)
    uniq_pairs, _ = _sorted_unique(pair)
    blocks_of_pairs, n_reg = _sorted_unique(uniq_pairs // n_regions)
    multi = n_reg[np.searchsorted(blocks_of_pairs, w.block_ids)] >= 2

    return SharingStats(
        prompt_tokens=int(w.prompt_len.sum()),
        reused_tokens=int(vol[reused].sum()),
        cross_region_tokens=int(vol[reused & multi].sum()),
        remote_only_tokens=int(vol[reused & ~local].sum()),
    )
