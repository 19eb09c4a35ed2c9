"""The emulated engine: a FIFO of prefills on one "GPU", decode in a continuous batch, counters.

Owns the scheduling model of ``sim/cost.py`` (prefills one at a time in arrival order; decode
alongside, not delaying the prefill queue), the load counters ``/v1/loads`` reports, and the byte
tokenizer. Publishes the cache's events when a prefill starts: the cache has changed by then (SGLang
inserts at the end of the forward pass; the few milliseconds do not matter to the index).
Must not: know HTTP (``server``) or the wire format (``publisher``).

Tokenizer: one token per UTF-8 byte (ids 0..255), so text round-trips and no vocabulary file is
needed; generated ids are deterministic lowercase letters seeded by the prompt.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from workers.emulated.cache import Admission, PrefixCache
from workers.emulated.costs import EmulatedCosts
from workers.emulated.publisher import EventPublisher


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def detokenize(ids: Sequence[int]) -> str:
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", "replace")


@dataclass(slots=True)
class Loads:
    running: int = 0
    waiting: int = 0
    waiting_uncached_tokens: int = 0
    prefill_busy_us: int = 0
    prefill_uncached_tokens: int = 0
    requests: int = 0


class Engine:
    def __init__(self, cache: PrefixCache, costs: EmulatedCosts, publisher: EventPublisher) -> None:
        self.cache = cache
        self.costs = costs
        self.publisher = publisher
        self.loads = Loads()
        self._gpu = asyncio.Lock()

    async def prefill(self, tokens: Sequence[int]) -> Admission:
        """Queue, then prefill ``tokens``; the request counts as running until ``finish``."""
        dev, host = self.cache.match(tokens)
        estimate = max(len(tokens) - dev - host, 0)
        loads = self.loads
        loads.waiting += 1
        loads.waiting_uncached_tokens += estimate
        try:
            await self._gpu.acquire()
        finally:
            loads.waiting -= 1
            loads.waiting_uncached_tokens -= estimate
        try:
            loads.running += 1
            loads.requests += 1
            adm = self.cache.admit(tokens)
            uncached = adm.prompt_tokens - adm.cached_tokens
            model_ms = self.costs.prefill_ms(uncached, adm.host_hit_tokens)
            if adm.events:  # the cache already changed: publish even if the client goes away
                await self.publisher.publish(adm.events)
            await asyncio.sleep(self.costs.sleep_s(model_ms))
            loads.prefill_busy_us += int(model_ms * 1000)
            loads.prefill_uncached_tokens += uncached
            return adm
        finally:
            self._gpu.release()

    def done(self) -> None:
        """The request admitted by ``prefill`` finished (or failed)."""
        self.loads.running -= 1

    async def decode(self, tokens: Sequence[int], max_new_tokens: int) -> AsyncIterator[int]:
        """Generated ids, one per decode step."""
        seed = zlib.crc32(bytes(t & 0xFF for t in tokens[-64:]))
        for i in range(max_new_tokens):
            await asyncio.sleep(self.costs.sleep_s(self.costs.decode_ms_per_token))
            yield 97 + (seed + 7 * i) % 26

    async def flush(self) -> None:
        await self.publisher.publish(self.cache.clear())
