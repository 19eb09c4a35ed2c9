"""What the router decided for one request, as data: the winner plus every term of the best few.

Owns ``Decision`` (returned by ``Router.choose``, consumed by the edge, the simulator, the
herding guard and the hot-prefix tracker) and ``ScoreTerms`` (one candidate's score broken
into the formula's terms, for /debug/explain). It must not compute anything but the unpacking
of the kernel's explain rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from kvcompass.router import score as sc
from kvcompass.types import Tier


@dataclass(frozen=True, slots=True)
class ScoreTerms:
    """One candidate's score = wan_ms + queue_ms + prefill_ms + reload_ms."""

    worker: int
    score_ms: float
    wan_ms: float
    queue_ms: float
    """Tq estimate (plus herding-guard work if on); 0 when load awareness is off."""
    prefill_ms: float
    """(1+λ)·β·(L − b·m): the priced recomputation."""
    reload_ms: float
    """γ·b·m for a DRAM hit with tier awareness on, else 0."""
    matched_tokens: int
    """m as scored: 0 for remote workers when cross-region reuse is off."""
    effective_tokens: float
    """b·m."""
    belief: float
    tier: Tier

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready mapping (tier by name) for /debug/explain."""
        return {
            "worker": self.worker,
            "score_ms": self.score_ms,
            "wan_ms": self.wan_ms,
            "queue_ms": self.queue_ms,
            "prefill_ms": self.prefill_ms,
            "reload_ms": self.reload_ms,
            "matched_tokens": self.matched_tokens,
            "effective_tokens": self.effective_tokens,
            "belief": self.belief,
            "tier": self.tier.name,
        }


class Decision(NamedTuple):
    """The forwarding decision for one request at one edge.

    A ``NamedTuple``, not the house's frozen dataclass: one is built per request on the
    forwarding path, and a frozen dataclass's per-field ``object.__setattr__`` costs several
    times the whole score kernel at W = 14. It is just as immutable. Compare fields, not whole
    Decisions: ``top_terms`` is an array, so ``==`` on two Decisions is ambiguous.

    ``top_terms`` holds the kernel's explain rows (best first, ties to the lower id; columns
    ``score.TERM_*``); ``explain()`` turns them into ``ScoreTerms``. Kept packed so that
    ``choose`` stays a few microseconds when nobody asks for the explanation.
    """

    worker: int
    """The winner: the worker with the lowest score (lowest id among equals)."""
    score_ms: float
    lambda_price: float
    """λ used for this decision."""
    min_queue_ms: float
    """min over workers of the Tq the score used (0 when load awareness is off)."""
    prompt_tokens: int
    claimed_tokens: int
    """The match the edge counts on at the winner; echo it into ``Router.on_response``."""
    predicted_service_ms: float
    """β·(L − b·m) + reload at the winner: what the herding guard adds on forward."""
    winner_is_local_holder: bool
    """The winner is in the edge's region and holds a match: a local hit."""
    local_holder: int
    """Best-scoring holder in the edge's region, -1 if the region holds no match."""
    local_holder_lost_to_load: bool
    """The local holder lost although, queue terms aside, it was at least as good as the winner."""
    remote_holder: int
    """Longest-matching holder outside the region whose match is >= its region's n1, or -1."""
    remote_holder_tokens: int
    top_terms: NDArray[np.float64]

    @property
    def top_workers(self) -> NDArray[np.int64]:
        """Ids of the explained candidates, best first."""
        return self.top_terms[:, sc.TERM_WORKER].astype(np.int64)

    def explain(self) -> tuple[ScoreTerms, ...]:
        """Every score term of the top candidates, best first."""
        t = self.top_terms
        return tuple(
            ScoreTerms(
                worker=int(t[i, sc.TERM_WORKER]),
                score_ms=float(t[i, sc.TERM_SCORE]),
                wan_ms=float(t[i, sc.TERM_WAN]),
                queue_ms=float(t[i, sc.TERM_QUEUE]),
                prefill_ms=float(t[i, sc.TERM_PREFILL]),
                reload_ms=float(t[i, sc.TERM_RELOAD]),
                matched_tokens=int(t[i, sc.TERM_MATCHED]),
                effective_tokens=float(t[i, sc.TERM_EFFECTIVE]),
                belief=float(t[i, sc.TERM_BELIEF]),
                tier=Tier(int(t[i, sc.TERM_TIER])),
            )
            for i in range(t.shape[0])
        )
