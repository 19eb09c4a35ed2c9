"""Consistent-hash rings and the hash-placement rule of the hash baselines (paper §2.3, §5.1).

Owns the one ring implementation of the tree: ``HashRing`` (Karger et al., STOC 1997: members
own virtual nodes on a 2**64 circle, a key belongs to the first virtual node clockwise of its
point), ``LevelRings`` (the paper's "six independent content-hash rings", one per prefix level)
and ``place`` (where a request goes given which ring owners hold their level's prefix). The
simulator's ``consistent_hash`` and ``chord`` baselines and the edge's ``consistent_hash`` policy
all use these, so a prefix has the same designated owner everywhere. Must not know how presence
is learned (announcements, DHT gets, an index view): callers pass it in.

Layout (every position from ``kvcompass.mix.splitmix64``, so it is a pure function of the seeds):

* ring of seed ``s`` over ``n`` members with ``v`` virtual nodes each: virtual node ``m·v + k``
  of member ``m`` sits at ``splitmix64(m·v + k, s)``; a key sits at ``splitmix64(key, s)``; ties
  between equal points go to the lower virtual-node id (stable sort).
* ``LevelRings``: ring ``j`` has seed ``splitmix64(j + 1, seed)`` (independent rings); ``VNODES`` =
  100 virtual nodes per member (a ±10% share per member, the usual count) and ``RING_SEED`` are
  the defaults of every user.
* ``ladder(first, n, grain)``: the rings' prefix lengths, ``first`` rounded up to a multiple of
  ``grain`` (the cache's block: a prefix that is not a whole number of blocks cannot be held)
  and doubled ``n - 1`` times, so every ring can hit whatever the block size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.mix import splitmix64, splitmix64_array

VNODES = 100
"""Virtual nodes per member on every ring."""
RING_SEED = 0x6B76_636F_6D70_6173  # "kvcompas"
"""Seed the rings' seeds derive from (any 64-bit value; fixed so every user agrees)."""


class HashRing:
    """One consistent-hash ring: ``points`` ascending, ``members[i]`` owns ``points[i]``."""

    __slots__ = ("members", "points", "seed")

    def __init__(self, n_members: int, vnodes: int, seed: int) -> None:
        if n_members < 1 or vnodes < 1:
            raise InvalidInputError(
                f"HashRing: expected n_members >= 1 and vnodes >= 1, got {n_members}, {vnodes}"
            )
        self.seed = int(seed)
        pts = splitmix64_array(np.arange(n_members * vnodes, dtype=np.uint64), self.seed)
        order = np.argsort(pts, kind="stable")
        self.points: NDArray[np.uint64] = pts[order]
        self.members: NDArray[np.int64] = np.repeat(np.arange(n_members, dtype=np.int64), vnodes)[
            order
        ]

    def __len__(self) -> int:
        return int(self.points.shape[0])

    def successor(self, point: int) -> int:
        """Index of the first virtual node at or clockwise after ``point`` (wraps to 0)."""
        i = int(np.searchsorted(self.points, np.uint64(point), side="left"))
        return i if i < self.points.shape[0] else 0

    def owner(self, key: int) -> int:
        """Member owning ``key`` (its point is ``splitmix64(key, seed)``)."""
        return int(self.members[self.successor(splitmix64(key, self.seed))])

    def owners(self, keys: NDArray[np.uint64]) -> NDArray[np.int64]:
        """Member owning each key (vectorised ``owner``)."""
        idx = np.searchsorted(self.points, splitmix64_array(keys, self.seed), side="left")
        idx[idx == self.points.shape[0]] = 0
        return self.members[idx]


class LevelRings:
    """One independent ``HashRing`` per prefix level; ring ``j`` places level-``j`` keys."""

    __slots__ = ("rings", "seeds")

    def __init__(
        self, n_members: int, n_levels: int, vnodes: int = VNODES, seed: int = RING_SEED
    ) -> None:
        self.seeds = [splitmix64(j + 1, seed) for j in range(n_levels)]
        self.rings = [HashRing(n_members, vnodes, s) for s in self.seeds]

    def __len__(self) -> int:
        return len(self.rings)

    def owners(self, keys: Sequence[int] | NDArray[np.uint64]) -> list[int]:
        """Owner of ``keys[j]`` on ring ``j``, for the first ``len(keys)`` levels."""
        if len(keys) > len(self.rings):
            raise InvalidInputError(f"owners: at most {len(self.rings)} keys, got {len(keys)}")
        return [self.rings[j].owner(int(k)) for j, k in enumerate(keys)]


def ladder(first_tokens: int, n_levels: int, grain_tokens: int) -> list[int]:
    """The rings' level lengths: ``first`` on the ``grain`` grid, doubled ``n_levels - 1`` times."""
    if first_tokens < 1 or n_levels < 1 or grain_tokens < 1:
        raise InvalidInputError(
            f"ladder: expected positive arguments, got {first_tokens}, {n_levels}, {grain_tokens}"
        )
    base = -(-first_tokens // grain_tokens) * grain_tokens
    return [base << j for j in range(n_levels)]


def place(owners: Sequence[int], held: Sequence[bool]) -> tuple[int, int]:
    """(worker, level) of a request whose level-``j`` prefix is designated to ``owners[j]``.

    ``held[j]``: the designated owner of level ``j`` is known to hold that prefix. The request
    goes to the owner of its deepest held level (the longest reuse hash placement can find);
    with none held, to the owner of its deepest level (level -1 is returned): the prefix the
    request names materialises where its own ring designates it, so every ring, not only the
    first, comes to hold prefixes at their owners (sending every miss to the first level's owner
    made six rings act as one keyed on the first level, and concentrated whole families on it:
    on Mixed at 0.8 λ0 that rule had a 1.9× higher P99 TTFT, see sim/schemes/BASELINES.md).
    ``owners`` must not be empty.
    """
    if not owners or len(held) != len(owners):
        raise InvalidInputError(
            f"place: expected equal, non-empty owners and held, got {len(owners)}, {len(held)}"
        )
    for j in range(len(owners) - 1, -1, -1):
        if held[j]:
            return int(owners[j]), j
    return int(owners[-1]), -1
