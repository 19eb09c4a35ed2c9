"""``local_least_loaded``: a cache-blind load balancer over the region's workers.

The region's worker with the lowest queue estimate (live ``/v1/loads`` polls plus the work this
edge sent since), ties to fewer in-flight requests from this edge, then the lower id.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from edge.schemes.base import EdgeState
from kvcompass.discovery import Lookup
from kvcompass.router import Decision


class LocalLeastLoaded:
    """The region's workers by queue estimate; never leaves the region."""

    name: ClassVar[str] = "local_least_loaded"

    def __init__(self, state: EdgeState) -> None:
        self.state = state

    def order(
        self, tokens: NDArray[np.int32], lookup: Lookup, decision: Decision
    ) -> tuple[list[int], int]:
        return self.state.local_least_loaded(), 0
