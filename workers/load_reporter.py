"""Load reporter: poll workers' ``GET /v1/loads`` and publish the region's queue vector every Δ.

Owns the ``QueueVector`` records (topic ``queue-vectors``, key = region id) built from every
worker's estimate (``kvcompass.router.load_report.worker_queue_ms``, the one the edges' live
poll applies too). Must not: route, or keep history beyond one poll. A worker that does not
answer within the period is left out of that vector (edges keep their last value and age it).
``seq`` is the reporter's wall clock in ms, so several reporters of one region (one per sidecar)
stay ordered. Each vector also carries the cache state of the workers whose bridge runs in this
sidecar (``cache_states``: bridged ids, and those degraded), so every edge sees a degraded
worker within Δ (``QueueVector`` v2).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from kvcompass.router.load_report import worker_queue_ms
from wire.codec import AvroCodec, int32_key
from wire.producer import ProducerPort

log = logging.getLogger(__name__)


CacheStates = Callable[[], tuple[list[int], list[int]]]
"""(workers bridged by this sidecar, those of them whose cache is unknown), read at each Δ."""


def vector_record(
    region_id: int,
    queues: Sequence[tuple[int, float]],
    now_ms: int,
    bridged: Sequence[int] = (),
    cache_unknown: Sequence[int] = (),
) -> dict[str, Any]:
    return {
        "region_id": region_id,
        "worker_ids": [w for w, _ in queues],
        "queue_ms": [q for _, q in queues],
        "seq": now_ms,
        "timestamp_ms": now_ms,
        "bridged_worker_ids": list(bridged),
        "cache_unknown_worker_ids": list(cache_unknown),
    }


class LoadReporter:
    def __init__(
        self,
        region_id: int,
        workers: Sequence[tuple[int, str]],
        fallback_ms_per_token: float,
        period_ms: int,
        sink: ProducerPort,
        codec: AvroCodec,
        topic: str,
        cache_states: CacheStates | None = None,
    ) -> None:
        self.region_id = region_id
        self.cache_states = cache_states
        self.workers = list(workers)
        self.fallback = fallback_ms_per_token
        self.period_s = period_ms / 1000.0
        self.sink, self.codec, self.topic = sink, codec, topic
        self.published = 0
        self.failures = 0

    async def _one(self, http: aiohttp.ClientSession, url: str) -> float | None:
        try:
            async with http.get(url.rstrip("/") + "/v1/loads") as resp:
                resp.raise_for_status()
                return worker_queue_ms(await resp.json(), self.fallback)
        except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
            self.failures += 1
            log.debug("loads from %s: %s", url, exc)
            return None

    async def poll_once(self, http: aiohttp.ClientSession) -> dict[str, Any] | None:
        got = await asyncio.gather(*(self._one(http, url) for _, url in self.workers))
        queues = [(w, q) for (w, _), q in zip(self.workers, got, strict=True) if q is not None]
        if not queues:
            return None
        bridged, unknown = self.cache_states() if self.cache_states is not None else ([], [])
        rec = vector_record(self.region_id, queues, int(time.time() * 1000), bridged, unknown)
        value = self.codec.encode("QueueVector", rec)
        self.sink.produce(self.topic, value, int32_key(self.region_id))
        self.published += 1
        return rec

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.period_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                started = time.monotonic()
                await self.poll_once(http)
                await asyncio.sleep(max(self.period_s - (time.monotonic() - started), 0.0))
