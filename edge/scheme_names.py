"""The names of the edge's routing schemes: what ``edge.scheme`` and ``kvcompass demo --schemes``
accept. Its own module, importing nothing, so the CLI registers its flags without importing the
schemes (numba) and the registry (``edge.schemes``) takes its keys from here.
"""

from __future__ import annotations

EDGE_SCHEMES: tuple[str, ...] = (
    "kvcompass",
    "local_cache_aware",
    "consistent_hash",
    "local_least_loaded",
)
"""Every scheme of ``edge.schemes`` (one file each), KVCompass first."""
