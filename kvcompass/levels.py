"""Latency-derived levels: which prefix lengths an edge queries and a worker registers (§3.2).

Owns the arithmetic of architecture §4, computed once per deployment (a change of deployment is
a new index epoch). Must not hash, look anything up or know tables: ``kvcompass.keys`` turns
lengths into keys, the index stores them.

For edge region o and holder region r (β_r = r's prefill ms/token, B = block size, L = levels)::

    n1(o, r)  = max(B, ceil_B(ceil(RTT(o, r) / β_r)))      RTT = 2 × one-way WAN, r != o
    levels    = ceil_B(n1 · (2 + k) / 2)  for k = 0..L-1    n1, 1.5·n1, 2·n1, ... (steps of n1/2)
    same region (o == r): ceil_B(m · 2^k), k = 0..L-1       m = same_region_min_tokens (128)

``ceil_B`` rounds up to a multiple of B so every length ends on a worker page boundary. n1 is the
shortest prefix whose saved prefill (β_r · n1) pays for the round trip to r; the floor of one block
keeps a zero-latency pair well defined. ``RTT / β`` is rounded to 9 decimals before the ceiling so
float noise (0.3 / 0.1 = 2.9999999999999996) cannot move a length by a block. Same-region n1 is
reported as the first same-region level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment
from kvcompass.errors import InvalidInputError


def _ceil_to(x: int, block: int) -> int:
    return -(-x // block) * block


def first_level_tokens(rtt_ms: float, prefill_ms_per_token: float, block: int) -> int:
    """n1 for one cross-region pair: ceil(RTT / β), rounded up to ``block``, at least one block."""
    tokens = math.ceil(round(rtt_ms / prefill_ms_per_token, 9))
    return max(block, _ceil_to(tokens, block))


def cross_region_levels(n1: int, n_levels: int, block: int) -> list[int]:
    """n1, 1.5·n1, 2·n1, ... (L values), each rounded up to ``block``; exact integer arithmetic."""
    return [_ceil_to(-(-n1 * (2 + k) // 2), block) for k in range(n_levels)]


def same_region_levels(min_tokens: int, n_levels: int, block: int) -> list[int]:
    """min, 2·min, 4·min, ... (L values), each rounded up to ``block``."""
    return [_ceil_to(min_tokens << k, block) for k in range(n_levels)]


def _frozen(a: NDArray[np.int64]) -> NDArray[np.int64]:
    a.setflags(write=False)
    return a


@dataclass(frozen=True, slots=True, eq=False)
class Levels:
    """The level lengths of a deployment; arrays are read-only.

    ``matrix[o, r]`` holds the L ascending lengths an edge in region o queries toward holders in
    region r. ``registration[r]`` is the sorted union over o of ``matrix[o, r]``: a worker in r
    registers every prefix it holds at each of these lengths that fits, so any edge finds it.
    """

    matrix: NDArray[np.int64]
    n1_matrix: NDArray[np.int64]
    registration: tuple[NDArray[np.int64], ...]
    block_size_tokens: int

    @classmethod
    def from_deployment(cls, dep: Deployment) -> Levels:
        n, b, big_l = dep.n_regions, dep.block_size_tokens, dep.n_levels
        matrix = np.empty((n, n, big_l), dtype=np.int64)
        n1 = np.empty((n, n), dtype=np.int64)
        same = same_region_levels(dep.same_region_min_tokens, big_l, b)
        for o in range(n):
            for r in range(n):
                if o == r:
                    matrix[o, r] = same
                    n1[o, r] = same[0]
                    continue
                beta = dep.regions[r].prefill_ms_per_token
                first = first_level_tokens(dep.rtt_ms(o, r), beta, b)
                n1[o, r] = first
                matrix[o, r] = cross_region_levels(first, big_l, b)
        registration = tuple(_frozen(np.unique(matrix[:, r, :])) for r in range(n))
        return cls(_frozen(matrix), _frozen(n1), registration, b)

    @property
    def n_regions(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def n_levels(self) -> int:
        return int(self.matrix.shape[2])

    def _check(self, region: int, what: str) -> int:
        if isinstance(region, bool) or not 0 <= int(region) < self.n_regions:
            raise InvalidInputError(
                f"{what}: expected a region index in [0, {self.n_regions}), got {region!r}"
            )
        return int(region)

    def n1(self, o: int, r: int) -> int:
        """First level from edge region o toward holder region r (same-region minimum if o == r)."""
        return int(self.n1_matrix[self._check(o, "o"), self._check(r, "r")])

    def for_pair(self, o: int, r: int) -> NDArray[np.int64]:
        """The L ascending lengths an edge in o queries toward holders in r (read-only view)."""
        row: NDArray[np.int64] = self.matrix[self._check(o, "o"), self._check(r, "r")]
        return row

    def registration_lengths(self, r: int) -> NDArray[np.int64]:
        """Sorted, unique lengths at which a worker in region r registers its prefixes."""
        return self.registration[self._check(r, "r")]

    @property
    def max_registration_length(self) -> int:
        """Longest length any worker registers (longer prefixes are indexed only up to it)."""
        return int(self.matrix.max())

    def query_lengths(self, o: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Every (length, holder region) an edge in o queries, sorted by length then region.

        Returns ``(lengths, region_of_each)``, both shape (R·L,). The distinct lengths to hash
        are ``query_union(o)``.
        """
        row = self.matrix[self._check(o, "o")]
        lengths = row.reshape(-1)
        regions = np.repeat(np.arange(self.n_regions, dtype=np.int64), self.n_levels)
        order = np.lexsort((regions, lengths))
        return lengths[order], regions[order]

    def query_union(self, o: int) -> NDArray[np.int64]:
        """Sorted unique lengths an edge in o hashes (one key per length serves every region)."""
        return np.unique(self.matrix[self._check(o, "o")])
