"""``local_cache_aware``: SGLang gateway's ``cache_aware`` scheme inside the region.

As sgl-router describes its default scheme: if the region's load is imbalanced — max − min
open requests above ``balance_abs`` (64) *and* max above ``balance_rel`` (1.5) × min — go to
the worker with the fewest open requests; otherwise go to the worker with the longest prefix
match if the match covers more than ``cache_threshold`` (0.3) of the prompt, else to the least
loaded one (the gateway picks the replica with the smallest radix-tree record there; with our
exact index the least loaded worker is the closer analogue of "spread new prefixes"). Defaults
are the gateway's (``--cache-threshold``, ``--balance-abs-threshold``,
``--balance-rel-threshold``). Its prefix knowledge is *better* than sgl-router's approximate
tree: the edge's exact index, restricted to the region's workers. It never leaves the region.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from edge.schemes.base import EdgeState
from kvcompass.discovery import Lookup
from kvcompass.router import Decision


@dataclass(frozen=True, slots=True)
class CacheAwareParams:
    """SGLang gateway's ``cache_aware`` defaults (``--cache-threshold`` etc.)."""

    cache_threshold: float = 0.3
    balance_abs: int = 64
    balance_rel: float = 1.5


class LocalCacheAware:
    """Longest local match above the threshold unless the region is imbalanced."""

    name: ClassVar[str] = "local_cache_aware"

    def __init__(self, state: EdgeState, params: CacheAwareParams | None = None) -> None:
        self.state = state
        self.params = params or CacheAwareParams()

    def order(
        self, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        st, p = self.state, self.params
        prompt = len(tokens)
        ids = st.local
        load = st.open_requests[ids]
        lo, hi = int(load.min()), int(load.max())
        by_load = st.local_least_loaded()
        if hi - lo > p.balance_abs and hi > p.balance_rel * lo:
            return by_load, 0
        matched = lookup.match.matched_tokens[ids]
        best = int(np.argmax(matched))  # lowest id among equals
        m = int(matched[best])
        if prompt and m / prompt > p.cache_threshold:
            w = int(ids[best])
            return [w, *(x for x in by_load if x != w)], m
        return by_load, 0
