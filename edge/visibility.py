"""Routing you can see: the edge's counters of where each prompt's reusable prefix went.

Owns counting ``kvcompass.reuse_split``'s split (reusable, captured, forgone over the WAN,
delivered, lost to staleness) as ``kvc_edge_reuse_tokens_total{kind, region, bucket}``: region
is the serving worker's region, bucket the prompt's prefix-family bucket. The dashboard
``infra/grafana/kvcompass-edge.json`` plots it. Must not decide anything.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge.metrics import Metrics
from kvcompass.deployment import Deployment
from kvcompass.reuse_split import DecisionReuse, at_answer, at_decision, family_bucket

if TYPE_CHECKING:
    from edge.service import Explained


class ReuseCounter:
    """The split of every request this edge sends, into its metrics."""

    def __init__(self, deployment: Deployment, metrics: Metrics) -> None:
        self.worker_region = deployment.worker_region
        self.names = [r.name for r in deployment.regions]
        self.metrics = metrics

    def _labels(self, ex: Explained, worker: int) -> dict[str, str | int]:
        region = self.names[int(self.worker_region[worker])]
        return {"region": region, "bucket": family_bucket(ex.lookup.family_key)}

    def decided(self, ex: Explained, worker: int, captured: int) -> DecisionReuse:
        """``ex`` was accepted by ``worker``, counting on ``captured`` tokens."""
        split = at_decision(ex.lookup.match.matched_tokens, self.worker_region, worker, captured)
        labels = self._labels(ex, worker)
        inc = self.metrics.inc
        inc("reuse_tokens_total", split.reusable, kind="reusable", **labels)
        inc("reuse_tokens_total", split.captured, kind="captured", **labels)
        inc("reuse_tokens_total", split.forgone_wan, kind="forgone_wan", **labels)
        return split

    def answered(self, ex: Explained, worker: int, captured: int, delivered: int) -> int:
        """The engine reported ``delivered`` reused tokens; the tokens lost to staleness."""
        lost = at_answer(captured, delivered)
        labels = self._labels(ex, worker)
        self.metrics.inc("reuse_tokens_total", delivered, kind="delivered", **labels)
        self.metrics.inc("reuse_tokens_total", lost, kind="lost_stale", **labels)
        return lost
