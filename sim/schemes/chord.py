"""Chord DHT with the six-level hash layout, one DHT key per level (paper §5.1 baseline 2).

What the original design does: Chord (Stoica et al., SIGCOMM 2001) places every node and key on
a 2^m identifier circle; a key lives at its successor node. Each node keeps a finger table
(finger i = successor(n + 2^i)), so a lookup forwarded to the closest preceding finger halves
the remaining distance and ends in O(log N) hops. The paper's baseline stores each prefix at the
DHT key of each of six chunk-size levels; the node responsible for a key is where that prefix's
KV cache is placed (placement equals identity, §2.3).

What we model (placement rule shared with ``sim.schemes.consistent_hash.HashPlacement``):

* Overlay: every worker of every region runs ceil(log2 N) virtual Chord nodes (the Chord paper's
  remedy for uneven key ranges, §6) with 64-bit ids ``splitmix64(w·V + k, seed)``; finger tables are
  exact (a converged ring, no churn: the best case for Chord). A hop between two virtual nodes
  of the same worker is free. A level key's
  DHT id is ``splitmix64(key, seed_j)`` (one id space, six independent key families).
* Lookup: the edge hands each level's lookup to a Chord node of its own region (round robin over
  the region's workers), which routes recursively along closest-preceding fingers to the node
  whose successor owns the key; that node forwards to the owner, and the owner replies to the
  edge directly. Latency = edge -> first node + every hop + owner -> edge, each hop costing
  ``network.one_way_ms`` between the two nodes' regions (in-region hops cost the deployment's
  in-region one-way latency). The six level lookups are issued in parallel (the fastest correct
  choice: a sequential longest-first search would stop early but pay the hops one after
  another), so ``Route.lookup_ms`` is the slowest of them.
* Presence: the owner answers from its own cache, so a get() sees the live state
  (``LIVE_PRESENCE``); the request then goes to the owner of the longest level held at its
  designated node, or to its deepest level's owner on a miss (``HashPlacement.route``).

Parameters: 64-bit ids, ``CHORD_SEED`` fixed; levels and latencies from the deployment.
Owns the Chord overlay and its lookup cost; must not read ``ctx.cluster`` (presence comes from
the owners' cache events).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import pairwise
from typing import ClassVar

from kvcompass.mix import splitmix64
from kvcompass.ring import HashRing
from sim.schemes.base import SchemeContext
from sim.schemes.consistent_hash import HashPlacement

_RING = 1 << 64


def _in_open(x: int, a: int, b: int) -> bool:
    """x in the circular open interval (a, b)."""
    if a < b:
        return a < x < b
    return x > a or x < b


def _in_half_open(x: int, a: int, b: int) -> bool:
    """x in the circular interval (a, b]."""
    if a < b:
        return a < x <= b
    return x > a or x <= b


class Chord(HashPlacement):
    """Hash placement found through Chord lookups that cost WAN hops."""

    name = "chord"
    LIVE_PRESENCE = True
    CHORD_SEED: ClassVar[int] = 0x63686F7264  # "chord"

    def __init__(self, ctx: SchemeContext) -> None:
        super().__init__(ctx)
        # log2(N) virtual nodes per worker (Chord §6) so key ranges are balanced across workers.
        self.virtual = max(1, (self.n_workers - 1).bit_length())
        v = self.virtual
        overlay = HashRing(self.n_workers, v, self.CHORD_SEED)
        self.ids = [int(i) for i in overlay.points]
        self.node_worker = [int(w) for w in overlay.members]
        n = len(self.ids)
        # fingers[n]: distinct finger nodes (ring indices), farthest first.
        self.fingers: list[list[int]] = []
        for k in range(n):
            seen: list[int] = []
            for i in range(64):
                f = self._successor((self.ids[k] + (1 << i)) % _RING)
                if f != k and f not in seen:
                    seen.append(f)
            seen.sort(key=lambda f: (self.ids[f] - self.ids[k]) % _RING, reverse=True)
            self.fingers.append(seen)
        n_regions = len(self.one_way)
        self.region_nodes: list[list[int]] = [[] for _ in range(n_regions)]
        for k, w in enumerate(self.node_worker):
            self.region_nodes[self.worker_region[w]].append(k)
        self._rr = [0] * n_regions
        self.total_hops = 0
        self.total_lookups = 0

    def _successor(self, ident: int) -> int:
        i = bisect_left(self.ids, ident)
        return i if i < len(self.ids) else 0

    def path(self, start: int, ident: int) -> list[int]:
        """Ring indices visited by a lookup of ``ident`` from node ``start``, owner last."""
        ids, fingers = self.ids, self.fingers
        n_nodes = len(ids)
        node = start
        out = [node]
        if _in_half_open(ident, ids[(node - 1) % n_nodes], ids[node]) or n_nodes == 1:
            return out  # the first node owns it
        while True:
            succ = (node + 1) % n_nodes
            if _in_half_open(ident, ids[node], ids[succ]):
                out.append(succ)
                return out
            nxt = succ
            for f in fingers[node]:
                if _in_open(ids[f], ids[node], ident):
                    nxt = f
                    break
            node = nxt
            out.append(node)

    def lookup_ms(self, req: int, origin: int, owners: list[tuple[int, int]]) -> float:
        nodes = self.region_nodes[origin]
        ow, region, worker = self.one_way, self.worker_region, self.node_worker
        worst = 0.0
        for j, (_, key) in enumerate(owners):
            start = nodes[self._rr[origin] % len(nodes)]
            self._rr[origin] += 1
            hops = self.path(start, splitmix64(key, self.seeds[j]))
            t = ow[origin][region[worker[hops[0]]]]
            for a, b in pairwise(hops):
                if worker[a] != worker[b]:  # virtual nodes of one worker talk locally
                    t += ow[region[worker[a]]][region[worker[b]]]
            t += ow[region[worker[hops[-1]]]][origin]
            self.total_hops += len(hops) - 1
            self.total_lookups += 1
            worst = max(worst, t)
        return worst

    def owner(self, level: int, key: int) -> int:
        """The Chord successor of the level key's DHT id (the node a lookup ends at)."""
        return self.node_worker[self._successor(splitmix64(key, self.seeds[level]))]

    def finish(self) -> dict[str, float]:
        out = super().finish()
        out["mean_hops"] = self.total_hops / self.total_lookups if self.total_lookups else 0.0
        return out
