"""``kvcompass``: the joint score over every worker of every region (``kvcompass.router``).

The decision is the one the edge computes for every request anyway; this scheme only turns it
into the candidate order (winner, then the router's runners-up).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from edge.schemes.base import EdgeState
from kvcompass.discovery import Lookup
from kvcompass.router import Decision


class KVCompassScheme:
    """The router's winner first, then its top alternatives."""

    name: ClassVar[str] = "kvcompass"

    def __init__(self, state: EdgeState) -> None:
        self.state = state

    def order(
        self, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        return [decision.worker, *(int(w) for w in decision.top_workers)], decision.claimed_tokens
