"""``consistent_hash``: the paper's six content-hash rings, as the simulator's baseline runs them.

One ring per same-region level length (128, 256, …), 100 virtual nodes per worker, every region
on every ring: ``kvcompass.ring`` (``LevelRings`` and the placement rule ``place``), the same
rings and rule as ``sim.schemes.consistent_hash``. Presence comes from the edge's index (the ring
nodes' announcements), read at each owner's own region's lengths (the ladder is the same for
every region), so it is exact up to propagation delay. A prompt shorter than the first level has
no key on any ring and nothing to reuse: it goes to the region's least loaded worker.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from edge.schemes.base import EdgeState
from kvcompass.discovery import Lookup
from kvcompass.ring import LevelRings, place
from kvcompass.router import Decision


class ConsistentHashScheme:
    """Designated owners on the level rings; the deepest level an owner holds wins."""

    name: ClassVar[str] = "consistent_hash"

    def __init__(self, state: EdgeState) -> None:
        self.state = state
        self.ladder = np.asarray(state.levels.for_pair(state.origin, state.origin), np.int64)
        self.rings = LevelRings(int(state.worker_region.shape[0]), int(self.ladder.shape[0]))

    def order(
        self, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        st = self.state
        n = int(np.searchsorted(self.ladder, len(tokens), side="right"))
        if n == 0:
            return st.local_least_loaded(), 0
        lengths = self.ladder[:n]
        keys = st.discovery.hasher.keys_at(tokens, lengths)
        owners = np.asarray(self.rings.owners(keys), np.int64)
        view = st.discovery.view
        held = np.zeros(n, np.int64)
        regions = st.worker_region[owners]
        for r in np.unique(regions).tolist():
            m = view.match_keys(int(r), lengths, keys).matched_tokens
            sel = regions == r
            held[sel] = m[owners[sel]]
        w, j = place(owners.tolist(), (held >= lengths).tolist())
        if j < 0:
            return [w], 0
        return [w, *(int(x) for x in owners[:j][::-1] if x != w)], int(lengths[j])
