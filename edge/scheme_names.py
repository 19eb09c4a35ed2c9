"""The names of the edge's routing schemes: what ``edge.scheme`` and ``kvcompass demo --schemes``
accept. Its own module, importing nothing, so the CLI registers its flags without importing the
schemes (numba) and the registry (``edge.schemes``) takes its keys from here.
"""

from __future__ import annotations

KVCOMPASS_SCHEMES: tuple[str, ...] = ("kvcompass", "kvcompass_no_booking")
"""KVCompass and its ablation without route-and-reserve (``RouterConfig.booking`` off: every
edge forwards straight to the worker it picked and nobody books a region's workers for it; the
simulator's scheme of the same name). Both decide with the one decider (``kvcompass.decider``)."""

EDGE_SCHEMES: tuple[str, ...] = (
    *KVCOMPASS_SCHEMES,
    "local_cache_aware",
    "consistent_hash",
    "local_least_loaded",
)
"""Every scheme of ``edge.schemes`` (one file each), KVCompass's first."""


def is_kvcompass(scheme: str) -> bool:
    """``scheme`` is decided by a KVCompass decider (not a baseline's ordering)."""
    return scheme in KVCOMPASS_SCHEMES
