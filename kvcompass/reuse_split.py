"""Where the reusable prefix went: one split of prompt tokens, for the edge and the simulator.

Owns the definition of the routing-visibility split (issue 30 item 3; users of every router ask
for it): for each request, in prompt tokens,

* ``reusable``: the longest match the deciding edge's index knew anywhere (any region);
* ``captured``: the match the edge counted on at the worker it sent the request to;
* ``forgone_wan``: ``reusable − captured`` when the best holder is in another region than the
  chosen worker (the score chose recompute nearer over the WAN to the holder), else 0;
* ``delivered``: what the engine reported reused (``cached_tokens``);
* ``lost_stale``: ``captured − delivered`` when positive (claimed, not delivered: the index or
  the overlay was stale, or the page was evicted on the way).

and the prefix-family bucket a request is counted under (``family_bucket``: its family key mod
``FAMILY_BUCKETS``, so a dashboard can tell one hot family from the rest without one series per
family). The edge counts it as ``kvc_edge_reuse_tokens_total{kind, region, bucket}``; the
simulator's KVCompass sums it under the same kind names (``ReuseTally``). Must not know where
the numbers came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

REUSE_KINDS: tuple[str, ...] = ("reusable", "captured", "forgone_wan", "delivered", "lost_stale")
FAMILY_BUCKETS = 16


@dataclass(frozen=True, slots=True)
class DecisionReuse:
    """The split known when the request leaves: reusable, captured, forgone over the WAN."""

    reusable: int
    captured: int
    forgone_wan: int


def at_decision(
    matched_tokens: NDArray[np.int64], worker_region: NDArray[np.int64], chosen: int, captured: int
) -> DecisionReuse:
    """The split of one request sent to ``chosen`` counting on ``captured`` tokens, given the
    index's match of every worker (``matched_tokens``, (n_workers,))."""
    if matched_tokens.size == 0:
        return DecisionReuse(0, int(captured), 0)
    best = int(np.argmax(matched_tokens))
    reusable = max(int(matched_tokens[best]), int(captured))
    far = int(worker_region[best]) != int(worker_region[chosen])
    return DecisionReuse(reusable, int(captured), reusable - int(captured) if far else 0)


def at_answer(captured: int, delivered: int) -> int:
    """``lost_stale`` of one answered request."""
    return max(int(captured) - int(delivered), 0)


def family_bucket(family_key: int) -> int:
    """The bucket a prefix family is counted under (0..FAMILY_BUCKETS-1)."""
    return int(family_key) % FAMILY_BUCKETS


@dataclass(slots=True)
class ReuseTally:
    """Totals of the split over many requests (the simulator's per-run figures)."""

    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REUSE_KINDS, 0))

    def decided(self, split: DecisionReuse) -> None:
        t = self.tokens
        t["reusable"] += split.reusable
        t["captured"] += split.captured
        t["forgone_wan"] += split.forgone_wan

    def answered(self, captured: int, delivered: int) -> None:
        self.tokens["delivered"] += int(delivered)
        self.tokens["lost_stale"] += at_answer(captured, delivered)
