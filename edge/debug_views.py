"""The edge's debug answers: ``/debug/explain/{id}`` (one recent decision and what became of it)
and ``/debug/lookup`` (every holder of a prompt's prefix), as JSON-ready dicts.

Reads ``edge.service.EdgeService``'s recent decisions and its active decider's lookup; changes
nothing. Must not know HTTP (``edge.app`` serves these).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from edge.service import EdgeService
from edge.tenants import Scope
from kvcompass.types import Tier


def explain(service: EdgeService, request_id: str) -> dict[str, Any] | None:
    """A recent decision of ``service`` (None: unknown or evicted)."""
    ex = service.recent.get(request_id)
    if ex is None:
        return None
    dep, wr = service.deployment, service.worker_region
    d = ex.decision
    cands = []
    for t in d.explain():
        row = t.as_dict()
        row["region"] = dep.regions[wr[t.worker]].name
        cands.append(row)
    return {
        "request_id": request_id,
        "edge_region": dep.regions[service.origin].name,
        "prompt_tokens": d.prompt_tokens,
        "scheme": ex.scheme,
        "winner": ex.winner,
        "scheme_order": ex.order,
        "scheme_claimed_tokens": ex.claimed,
        "served_by": ex.served_by,
        "claimed_tokens": d.claimed_tokens,
        "reused_tokens": ex.reused_tokens,
        "lambda_price": d.lambda_price,
        "min_queue_ms": d.min_queue_ms,
        "predicted_service_ms": d.predicted_service_ms,
        "winner_is_local_holder": d.winner_is_local_holder,
        "local_holder": d.local_holder,
        "local_holder_lost_to_load": d.local_holder_lost_to_load,
        "remote_holder": d.remote_holder,
        "remote_holder_tokens": d.remote_holder_tokens,
        "family_key": ex.lookup.family_key,
        "reuse_tokens": ex.reuse,
        "relay_region": ex.plan.relay_region,
        "relayed_for": ex.relayed_for,
        "refused_by": ex.refused_by,
        "attempts": ex.attempts,
        "candidates": cands,
    }


def holders(
    service: EdgeService, tokens: NDArray[np.int32], scope: Scope | None = None
) -> dict[str, Any]:
    """Every worker with a match for this prompt (in ``scope``'s namespace), longest first."""
    discovery = service.discovery if scope is None else service.scoped(scope)
    lk = service.decider.lookup(np.asarray(tokens, dtype=np.int32), discovery.hasher)
    m = lk.match
    rows = [
        {
            "worker": int(w),
            "region": service.deployment.regions[service.worker_region[w]].name,
            "matched_tokens": int(m.matched_tokens[w]),
            "tier": Tier(int(m.tiers[w])).name,
        }
        for w in np.flatnonzero(m.matched_tokens > 0).tolist()
    ]
    rows.sort(key=lambda r: (-r["matched_tokens"], r["worker"]))
    return {
        "prompt_tokens": len(tokens),
        "queried_lengths": lk.lengths.tolist(),
        "family_key": lk.family_key,
        "holders": rows,
    }
