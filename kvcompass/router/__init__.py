"""Edge router: the joint score over every worker, the queue view, cache beliefs, hot prefixes.

Pure core (paper §3.4): every function takes time as ``now_ms`` and returns decisions as data
(``Decision``, ``MigrationRequest``). The edge, the simulator and the benchmarks call the same
``Router`` methods.
"""

from kvcompass.router.belief import CacheBelief
from kvcompass.router.config import RouterConfig
from kvcompass.router.decision import Decision, ScoreTerms
from kvcompass.router.hot_prefix import HotPrefixTracker, MigrationMode, MigrationRequest
from kvcompass.router.pending import PendingHolders
from kvcompass.router.queue_view import BroadcastSchedule, QueueView, broadcast_targets
from kvcompass.router.router import QueueVector, Router
from kvcompass.router.score import capacity_price, score_workers

__all__ = [
    "BroadcastSchedule",
    "CacheBelief",
    "Decision",
    "HotPrefixTracker",
    "MigrationMode",
    "MigrationRequest",
    "PendingHolders",
    "QueueVector",
    "QueueView",
    "Router",
    "RouterConfig",
    "ScoreTerms",
    "broadcast_targets",
    "capacity_price",
    "score_workers",
]
