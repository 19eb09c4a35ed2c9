"""Which workers' caches are unknown right now, as their sidecars report it.

Owns the per-worker state folded from ``QueueVector`` v2 records: a sidecar that lost KV events
older than its engine's replay buffer publishes CLEARED (the index then lists nothing of the
worker while the engine still holds pages) and, until it has re-learned the cache, lists the
worker in ``cache_unknown_worker_ids``. A sidecar speaks only for the workers it bridges
(``bridged_worker_ids``), so a vector from another sidecar of the region changes nothing about
them. The edge shows the state in ``/health``, ``/debug/explain`` and ``/metrics``; routing is
unchanged (the index's answer for such a worker is a lower bound, which the joint score already
treats conservatively). Must not: do I/O or know Kafka (``edge.sync`` calls ``report``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kvcompass.errors import InvalidInputError


@dataclass
class CacheStates:
    """Workers whose cache is unknown, with the time (ms) they were first reported so."""

    unknown_since_ms: dict[int, float] = field(default_factory=dict)
    reports: int = 0
    """Transitions to unknown seen (the ``cache_unknown_total`` counter counts them per worker)."""

    def report(
        self, bridged: Iterable[int], unknown: Iterable[int], n_workers: int, now_ms: float
    ) -> list[int]:
        """Fold one sidecar's report in; returns the workers that just became unknown.

        Raises ``InvalidInputError`` (the record is dead-lettered) on ids out of range or an
        unknown worker the sidecar does not bridge.
        """
        bridged_set, unknown_set = set(bridged), set(unknown)
        if any(not 0 <= w < n_workers for w in bridged_set):
            raise InvalidInputError(f"bridged_worker_ids: expected 0..{n_workers - 1}, got "
                                    f"{sorted(bridged_set)[:20]}")  # fmt: skip
        if not unknown_set <= bridged_set:
            raise InvalidInputError(
                f"cache_unknown_worker_ids: expected a subset of bridged_worker_ids, got "
                f"{sorted(unknown_set - bridged_set)[:20]} outside it"
            )
        became = sorted(w for w in unknown_set if w not in self.unknown_since_ms)
        for w in became:
            self.unknown_since_ms[w] = now_ms
        for w in bridged_set - unknown_set:
            self.unknown_since_ms.pop(w, None)
        self.reports += len(became)
        return became

    def unknown(self) -> list[int]:
        """Workers whose cache is unknown now, ascending."""
        return sorted(self.unknown_since_ms)
