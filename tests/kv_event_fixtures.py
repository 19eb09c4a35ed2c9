"""Shared helpers of the index-event tests (rechunk, maintenance, patches, shell): the testbed
deployment's layout and levels, and KvEvent records."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from kvcompass.deployment import builtin_deployment
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.rechunk import EventRef, Rechunker

DEP = builtin_deployment("paper-testbed-14x3")
LAYOUT = TableLayout.for_regions([r.n_workers for r in DEP.regions])
LEVELS = Levels.from_deployment(DEP)
REGION = np.asarray(DEP.worker_region, dtype=np.int64)
MODEL = "m/test"


def rechunker(n_shards: int = 3) -> Rechunker:
    return Rechunker(LAYOUT, LEVELS, REGION, n_shards)


def source(offset: int = 0, worker: int = 0) -> EventRef:
    return EventRef(worker, offset, "kv-events", 0, offset, 1_000 + offset)


_SEQ = itertools.count(1)
"""Default ``engine_seq``: increasing across every event made, as a worker's are."""


def event(worker: int, tokens: np.ndarray, op: str = "STORED", tier: str = "VRAM",
          **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "worker_id": worker, "region_id": int(REGION[worker]), "model": MODEL,
        "sharing_group": None, "op": op, "tier": tier, "token_count": int(tokens.size),
        "token_ids": tokens.astype("<i4").tobytes(), "block_hashes": [],
        "parent_block_hash": None, "block_size_tokens": 16, "registration_lengths": None,
        "registration_keys": None, "engine_seq": next(_SEQ), "timestamp_ms": 1_000, **extra,
    }  # fmt: skip
