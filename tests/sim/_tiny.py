"""Hand-built deployments and workloads for the simulator scenarios (small, exact, readable)."""

from __future__ import annotations

import numpy as np

from kvcompass.deployment import Deployment, Region
from sim.workloads.workload import Kind, Workload


def two_regions(one_way_ms: float = 100.0, beta: float = 0.1, workers: int = 1) -> Deployment:
    """Two regions, ``workers`` workers each, one WAN link."""
    return Deployment(
        name="tiny-2",
        regions=(Region("a", workers, beta), Region("b", workers, beta)),
        wan_one_way_ms=((0.0, one_way_ms), (one_way_ms, 0.0)),
    )


def workload(
    prompts: list[list[int]],
    arrival_ms: list[float],
    origin: list[int],
    block_tokens: int = 16,
    output_len: int = 1,
) -> Workload:
    """Requests whose prompts are given as block-id lists (ids must be prefix-closed)."""
    n = len(prompts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in prompts])
    return Workload(
        name="tiny",
        block_tokens=block_tokens,
        arrival_ms=np.asarray(arrival_ms, dtype=np.float64),
        origin_region=np.asarray(origin, dtype=np.int64),
        prompt_len=np.asarray([len(p) * block_tokens for p in prompts], dtype=np.int64),
        output_len=np.full(n, output_len, dtype=np.int64),
        block_ids=np.asarray([b for p in prompts for b in p], dtype=np.int64),
        block_offsets=offsets,
        tenant=np.zeros(n, dtype=np.int32),
        kind=np.full(n, int(Kind.TRACE_ROOT), dtype=np.int8),
    )


def path(prefix_id: int, shared_blocks: int, own_id: int, own_blocks: int) -> list[int]:
    """Block ids of a prompt: ``shared_blocks`` of family ``prefix_id`` then private blocks.

    Ids are prefix-closed: a shared block's id depends only on (family, position); a private
    block's on (request, position).
    """
    shared = [prefix_id * 100_000 + i for i in range(shared_blocks)]
    own = [10_000_000 + own_id * 10_000 + i for i in range(own_blocks)]
    return shared + own
