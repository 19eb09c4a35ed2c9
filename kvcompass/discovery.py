"""One edge's lookup: keys → multi-level view match, and the score over it.

Owns the composition the edge and the forwarding benchmark run per request: hash the prompt once
at every length this edge queries (``Levels.query_union``), read every (table, shard) view at
those lengths with the monotonicity rule, and score every worker. It adds no logic of its own
and no I/O. ``kvcompass.decider.Decider`` (the whole decision of one edge) looks prompts up
through it: from tokens (``lookup``, the edge) or from keys hashed in bulk (``lookup_keys``, the
simulator); ``decide`` is the score alone (no overlay, booking or ledger), for the scoring
benchmark and the core's own tests; no shell routes with it.

The prefix family of a request (hot-prefix tracking, paper §3.4) is its key at the shortest
queried length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.index_view import IndexView, Match
from kvcompass.keys import PrefixHasher
from kvcompass.router import Decision, Router


@dataclass(frozen=True, slots=True)
class Lookup:
    """The index's answer for one prompt at one edge, with the keys it was computed from."""

    lengths: NDArray[np.int64]
    keys: NDArray[np.uint64]
    match: Match

    @property
    def family_key(self) -> int:
        """Key of the shortest queried prefix (0 when the prompt is shorter than every level)."""
        return int(self.keys[0]) if self.keys.size else 0


class EdgeDiscovery:
    """The discovery plane as one edge (region ``origin``) uses it."""

    def __init__(self, origin: int, hasher: PrefixHasher, view: IndexView, router: Router) -> None:
        if router.origin != origin:
            raise InvalidInputError(f"router is for region {router.origin}, edge is {origin}")
        self.origin = origin
        self.hasher = hasher
        self.view = view
        self.router = router
        self._lengths = view.query_lengths(origin)

    def with_hasher(self, hasher: PrefixHasher) -> EdgeDiscovery:
        """This edge's discovery in another key namespace (a tenant's or model's hasher): the
        same view and router."""
        return EdgeDiscovery(self.origin, hasher, self.view, self.router)

    @property
    def query_lengths(self) -> NDArray[np.int64]:
        """Every length this edge queries, ascending."""
        return self._lengths

    def lookup(self, tokens: NDArray[np.int32], hasher: PrefixHasher | None = None) -> Lookup:
        """Holders of every queried prefix of ``tokens`` (validated by the hasher), hashed with
        ``hasher`` (a tenant's or model's namespace) or this edge's default one."""
        n = int(np.searchsorted(self._lengths, len(tokens), side="right"))
        lengths = self._lengths[:n]
        if n == 0:
            w = self.view.layout.n_workers
            empty = Match(np.zeros(w, np.int64), np.zeros(w, np.uint8))
            return Lookup(lengths, np.zeros(0, np.uint64), empty)
        keys = (hasher or self.hasher).keys_at(tokens, lengths)
        return Lookup(lengths, keys, self.view.match_keys(self.origin, lengths, keys))

    def lookup_keys(self, lengths: NDArray[np.int64], keys: NDArray[np.uint64]) -> Lookup:
        """Holders of a prompt whose keys at this edge's ascending query ``lengths`` are
        ``keys`` (hashed by the caller, e.g. in bulk before a replay)."""
        return Lookup(lengths, keys, self.view.match_keys(self.origin, lengths, keys))

    def decide(self, tokens: NDArray[np.int32], now_ms: float) -> tuple[Decision, Lookup]:
        """Lookup plus joint score over every worker: the forwarding decision."""
        found = self.lookup(tokens)
        m = found.match
        return self.router.choose(len(tokens), m.matched_tokens, m.tiers, now_ms), found
