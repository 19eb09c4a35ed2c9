"""Which shard owns a key, and a batch of keys split by shard: ``shard = key mod N``
(architecture §5).

One home for the rule every writer and reader of the index shares: the rechunk step (events →
per-shard ops), the maintenance side (``DiscoveryIndex``), the simulator's index window and the
views' lookups. Kafka partition s of ``index-ops`` and ``index-patches`` carries shard s, so the
rule is also the partitioner of those topics. Pure; keys are 63-bit ``uint64``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def shard_of(keys: NDArray[np.uint64], n_shards: int) -> NDArray[np.int64]:
    """The shard of every key (``key mod n_shards``), as int64."""
    return (keys % np.uint64(n_shards)).astype(np.int64)


def split_by_shard(
    keys: NDArray[np.uint64], n_shards: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``(order, bounds)``: ``keys[order[bounds[s]:bounds[s + 1]]]`` are shard s's keys, in their
    input order (one stable sort), for every s in ``0..n_shards-1``."""
    owner = shard_of(keys, n_shards)
    order = np.argsort(owner, kind="stable").astype(np.int64)
    bounds = np.zeros(n_shards + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n_shards), out=bounds[1:])
    return order, bounds
