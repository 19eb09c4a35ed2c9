"""Where the reusable prefix went in one demo run: the edges' own split, summed over its requests.

Owns fetching, after a run, each measured request's ``reuse_tokens`` from its origin edge's
``/debug/explain/{client id}`` (``kvcompass.reuse_split``: reusable, captured, forgone for WAN,
delivered, lost to staleness; the same kinds as the edge's ``kvc_edge_reuse_tokens_total`` and
the simulator's ``reuse_<kind>_tokens``) and summing it. Per request rather than a difference of
counters, so the warm-up's requests stay out, as they do from every other figure. Must not
start or change anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import aiohttp
import numpy as np
from numpy.typing import NDArray

from kvcompass.reuse_split import REUSE_KINDS

CONCURRENCY = 16
"""Explains in flight at once (each a few hundred bytes of JSON from a local edge)."""


async def fetch_reuse(
    edge_urls: Sequence[str], origins: NDArray[np.int64], request_ids: Sequence[str]
) -> dict[str, int]:
    """The split summed over ``request_ids`` (each asked at ``edge_urls[origin]``), plus
    ``explained``: how many the edges still knew (a failed or evicted one is left out)."""
    totals = dict.fromkeys(REUSE_KINDS, 0)
    sem = asyncio.Semaphore(CONCURRENCY)
    timeout = aiohttp.ClientTimeout(total=30.0)

    async def one(session: aiohttp.ClientSession, url: str, rid: str) -> object:
        async with sem, session.get(f"{url.rstrip('/')}/debug/explain/{rid}") as r:
            return (await r.json()).get("reuse_tokens") if r.status == 200 else None

    async with aiohttp.ClientSession(timeout=timeout) as session:
        pairs = zip(origins.tolist(), request_ids, strict=True)
        got = await asyncio.gather(*(one(session, edge_urls[o], rid) for o, rid in pairs))
    explained = 0
    for split in got:
        if isinstance(split, dict) and split:
            explained += 1
            for k in REUSE_KINDS:
                totals[k] += int(split.get(k, 0))
    return {**totals, "explained": explained}
