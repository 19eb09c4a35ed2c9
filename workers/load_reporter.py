"""Load reporter: poll workers' ``GET /v1/loads`` and publish the region's queue vector every Δ.

Owns the queueing estimate of a worker from its load report and the ``QueueVector`` records
(topic ``queue-vectors``, key = region id). Must not: route, or keep history beyond one poll.

Estimate (paper §3.4: expected queueing delay): a worker serves prefills one at a time, so a new
request waits for the uncached tokens queued ahead of it::

    queue_ms = num_waiting_uncached_tokens · β̂
    β̂ = total_prefill_busy_us / 1000 / total_prefill_uncached_tokens   (measured, cumulative)
        or the deployment region's prefill_ms_per_token before the first prefill

The prefill running now is not in ``num_waiting_*``; its remainder is unknown from the report
and left out (at most one prefill's time). A worker that does not answer within the period is
left out of that vector (edges keep their last value and age it). ``seq`` is the reporter's wall
clock in ms, so several reporters of one region (one per sidecar) stay ordered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from pipeline.codec import AvroCodec, int32_key
from workers.sink import RecordSink

log = logging.getLogger(__name__)


def queue_ms(load: Mapping[str, Any], fallback_ms_per_token: float) -> float:
    """Expected queueing delay of one ``loads[]`` entry, in ms, non-negative."""
    busy_us = float(load.get("total_prefill_busy_us") or 0)
    tokens = float(load.get("total_prefill_uncached_tokens") or 0)
    beta = busy_us / 1000.0 / tokens if tokens > 0 and busy_us > 0 else fallback_ms_per_token
    waiting = float(load.get("num_waiting_uncached_tokens") or 0)
    return max(waiting * beta, 0.0)


def worker_queue_ms(report: Mapping[str, Any], fallback_ms_per_token: float) -> float:
    """A ``/v1/loads`` body of one engine (all DP ranks of one worker): the busiest rank."""
    loads = report.get("loads") or []
    return max((queue_ms(x, fallback_ms_per_token) for x in loads), default=0.0)


def vector_record(
    region_id: int, queues: Sequence[tuple[int, float]], now_ms: int
) -> dict[str, Any]:
    return {
        "region_id": region_id,
        "worker_ids": [w for w, _ in queues],
        "queue_ms": [q for _, q in queues],
        "seq": now_ms,
        "timestamp_ms": now_ms,
    }


class LoadReporter:
    def __init__(
        self,
        region_id: int,
        workers: Sequence[tuple[int, str]],
        fallback_ms_per_token: float,
        period_ms: int,
        sink: RecordSink,
        codec: AvroCodec,
        topic: str,
    ) -> None:
        self.region_id = region_id
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
        rec = vector_record(self.region_id, queues, int(time.time() * 1000))
        self.sink.send(self.topic, int32_key(self.region_id), self.codec.encode("QueueVector", rec))
        self.published += 1
        return rec

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.period_s)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                started = time.monotonic()
                await self.poll_once(http)
                await asyncio.sleep(max(self.period_s - (time.monotonic() - started), 0.0))
