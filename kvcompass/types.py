"""Identifier types and small enums shared by every layer.

Ids are plain ints at run time; the ``NewType`` wrappers let mypy keep a worker index from being
passed where a region index is expected.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NewType

WorkerId = NewType("WorkerId", int)
"""Global worker index, 0..W-1, numbered region by region in deployment order."""
RegionId = NewType("RegionId", int)
"""Region index, 0..R-1, in deployment order."""
ShardId = NewType("ShardId", int)
"""Shard of the key space: ``key % n_shards``; one maintenance unit (Kafka partition) each."""
TableId = NewType("TableId", int)
"""Index table: one per (region, group of <=16 or <=32 workers)."""
PrefixKey = NewType("PrefixKey", int)
"""63-bit key naming the first c tokens of a prompt in one model namespace."""


class Tier(IntEnum):
    """Where a worker keeps a prefix's KV cache; the 2-bit field code stored in the index."""

    NONE = 0
    VRAM = 1
    DRAM = 2
