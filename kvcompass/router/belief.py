"""Cache belief b_r: how far the edge trusts worker r's index entries (paper §3.4).

Owns the per-worker EWMA ``b ← (1-α)·b + α·clamp(reused / claimed, 0, 1)`` where ``claimed`` is
the match the edge counted on when it forwarded (``Decision.claimed_tokens``) and ``reused`` the
prefix tokens the worker reports it actually reused. It must not look at scores or queues.

- Prior: ``RouterConfig.belief_prior`` (1.0) for a worker never heard from: index entries come
  from the worker's own cache events, so they are trusted until a response contradicts them.
- Claimed 0: the edge counted on nothing, so the response says nothing about the accuracy of
  the worker's entries; the belief is left unchanged (the ratio is undefined, not 0 or 1).
- Reused > claimed (the worker held more than the index knew): the ratio is clamped to 1.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError


class CacheBelief:
    """Per-worker b_r in [0, 1]; ``belief`` may be a view into the Router's score state."""

    __slots__ = ("belief", "n_updates", "weight")

    def __init__(
        self,
        n_workers: int,
        weight: float,
        prior: float,
        belief: NDArray[np.float64] | None = None,
    ) -> None:
        """``belief``: optional (W,) float64 buffer to own; it is filled with ``prior``."""
        if not (0 < weight <= 1 and 0 <= prior <= 1):
            raise InvalidInputError(
                f"expected weight in (0, 1] and prior in [0, 1], got {weight} and {prior}"
            )
        self.weight = weight
        self.belief = np.empty(n_workers) if belief is None else belief
        if self.belief.shape != (n_workers,) or self.belief.dtype != np.float64:
            raise InvalidInputError(
                f"expected belief buffer float64 ({n_workers},), got {self.belief.shape}"
            )
        self.belief[:] = prior
        self.n_updates = np.zeros(n_workers, np.int64)

    def update(self, worker: int, claimed_tokens: int, reused_tokens: int) -> float:
        """Fold one response into b_worker; return the new belief."""
        n = self.belief.shape[0]
        if not 0 <= worker < n:
            raise InvalidInputError(f"expected worker in [0, {n}), got {worker}")
        if claimed_tokens < 0 or reused_tokens < 0:
            raise InvalidInputError(
                f"expected claimed_tokens >= 0 and reused_tokens >= 0, "
                f"got {claimed_tokens} and {reused_tokens}"
            )
        if claimed_tokens == 0:
            return float(self.belief[worker])
        ratio = min(1.0, reused_tokens / claimed_tokens)
        new = (1.0 - self.weight) * float(self.belief[worker]) + self.weight * ratio
        self.belief[worker] = min(1.0, max(0.0, new))
        self.n_updates[worker] += 1
        return float(self.belief[worker])
