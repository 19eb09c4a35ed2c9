"""The emulated engine: a FIFO of prefills on one "GPU", decode in a continuous batch, counters.

Owns the scheduling model of ``sim/cost.py`` (prefills one at a time in arrival order; decode
alongside, not delaying the prefill queue), the load counters ``/v1/loads`` reports, and the byte
tokenizer. Publishes the cache's events when a prefill starts: the cache has changed by then (SGLang
inserts at the end of the forward pass; the few milliseconds do not matter to the index).
Must not: know HTTP (``server``) or the wire format (``publisher``).

Tiny-llama mode (``model`` given): prefill runs the torch model (CPU) on the tokens the cache
does not hold, reusing the cached pages' KV tensors; the measured compute time replaces the cost
model's, and decode is greedy from real logits. ``export_kv``/``import_kv`` copy pages between
workers (intra-region migration) without recomputing. KV tensor operations go through the model
(``tiny_llama``), so this module does not import torch and cost-model mode never loads it.

Tokenizer: one token per UTF-8 byte (ids 0..255), so text round-trips and no vocabulary file is
needed; generated ids are deterministic lowercase letters seeded by the prompt.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcompass.types import Tier
from workers.emulated.cache import Admission, PrefixCache
from workers.emulated.costs import EmulatedCosts
from workers.emulated.publisher import EventPublisher

if TYPE_CHECKING:
    from torch import Tensor

    from workers.emulated.tiny_llama import TinyLlama


@dataclass(slots=True)
class Loads:
    running: int = 0
    waiting: int = 0
    waiting_uncached_tokens: int = 0
    prefill_busy_us: int = 0
    prefill_uncached_tokens: int = 0
    requests: int = 0


ABORT_POLL_MS = 4000.0
"""How often a waiting request's client is checked (SGLang: ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT``,
4 s, in ``TokenizerManager._wait_one_response``); model ms, scaled like every other sleep."""


class ClientGone(Exception):
    """The HTTP client of a waiting request left: the request was aborted before its prefill."""


class Engine:
    def __init__(
        self,
        cache: PrefixCache,
        costs: EmulatedCosts,
        publisher: EventPublisher,
        model: TinyLlama | None = None,
        stream_interval: int = 1,
    ) -> None:
        self.cache = cache
        self.stream_interval = max(int(stream_interval), 1)
        """SGLang's ``--stream-interval``: a streamed response gets the first token at once, then
        one chunk per this many tokens (cost-model decode also sleeps once per chunk)."""
        self.costs = costs
        self.publisher = publisher
        self.model = model
        self.loads = Loads()
        self._gpu = asyncio.Lock()
        self._in_prefill: tuple[int, float, float] | None = None
        """(uncached tokens, perf_counter start, wall seconds) of the prefill in progress."""
        self._kv: dict[int, Tensor] = {}  # tiny-llama: prompt KV of running requests, by id(adm)

    def _compute(self, tokens: Sequence[int], adm: Admission) -> tuple[Admission, float]:
        """Tiny-llama prefill of what the cache does not hold; fills the fresh pages' KV.
        Returns the admission with logits, and the measured compute time in ms."""
        m = self.model
        assert m is not None
        p = self.cache.page_size
        started = time.perf_counter()
        past = m.concat([n.kv for n in adm.reused]) if adm.reused else None
        cached = len(adm.reused) * p
        logits, new_kv = m.forward(tokens[cached:], past)
        for node, kv in zip(adm.fresh, m.pages(new_kv, p, len(adm.fresh)), strict=True):
            node.kv = kv
        full = new_kv if past is None else m.concat([past, new_kv])
        ms = (time.perf_counter() - started) * 1000
        out = dataclasses.replace(adm, logits=logits[-1])
        self._kv[id(out)] = full
        return out, ms

    async def prefill(
        self, tokens: Sequence[int], disconnected: Callable[[], bool] | None = None
    ) -> Admission:
        """Queue, then prefill ``tokens``; the request counts as running until ``finish``.

        ``disconnected``: asked every ``ABORT_POLL_MS`` (model ms) while the request waits in the
        queue; true aborts it (``ClientGone``) before it takes the GPU, as SGLang's tokenizer
        manager aborts a waiting request whose HTTP client left (it polls every
        ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT`` = 4 s). Without it, requests a client gave up on
        (a hot-spotted worker's queue) kept the worker busy for minutes after the load stopped."""
        dev, host = self.cache.match(tokens)
        estimate = max(len(tokens) - dev - host, 0)
        loads = self.loads
        loads.waiting += 1
        loads.waiting_uncached_tokens += estimate
        try:
            await self._queue(disconnected)
        finally:
            loads.waiting -= 1
            loads.waiting_uncached_tokens -= estimate
        try:
            loads.running += 1
            loads.requests += 1
            adm = self.cache.admit(tokens)
            uncached = adm.prompt_tokens - adm.cached_tokens
            model_ms = self.costs.prefill_ms(uncached, adm.host_hit_tokens)
            self._in_prefill = (uncached, time.perf_counter(), self.costs.sleep_s(model_ms))
            if adm.events:  # the cache already changed: publish even if the client goes away
                await self.publisher.publish(adm.events)
            if self.model is not None and tokens:
                adm, model_ms = self._compute(tokens, adm)  # real compute is the cost
            else:
                await asyncio.sleep(self.costs.sleep_s(model_ms))
            loads.prefill_busy_us += int(model_ms * 1000)
            loads.prefill_uncached_tokens += uncached
            return adm
        finally:
            self._in_prefill = None
            self._gpu.release()

    async def _queue(self, disconnected: Callable[[], bool] | None) -> None:
        """Take the GPU lock; with ``disconnected``, give up (``ClientGone``) once it is true."""
        if disconnected is None or not self._gpu.locked():
            await self._gpu.acquire()
            return
        poll_s = max(self.costs.sleep_s(ABORT_POLL_MS), 0.05)
        acquire = asyncio.ensure_future(self._gpu.acquire())
        try:
            while not acquire.done():
                await asyncio.wait({acquire}, timeout=poll_s)
                if not acquire.done() and disconnected():
                    raise ClientGone("the client left while the request waited in the queue")
        except BaseException:
            if not acquire.cancel() and not acquire.cancelled() and acquire.exception() is None:
                self._gpu.release()  # it got the lock as we gave up
            raise

    def waiting_uncached_tokens(self) -> int:
        """Tokens not yet prefilled: the queue's, plus what remains of the prefill in progress
        (pro rata of its time). SGLang keeps a chunked prefill in its waiting state until its
        last chunk, so its remaining tokens count as waiting there too; leaving them out made an
        engine in the middle of a long prefill report an empty queue."""
        n = self.loads.waiting_uncached_tokens
        cur = self._in_prefill
        if cur is not None:
            uncached, started, duration_s = cur
            done = (time.perf_counter() - started) / duration_s if duration_s > 0 else 1.0
            n += int(uncached * max(0.0, 1.0 - done))
        return n

    def done(self, adm: Admission | None = None) -> None:
        """The request admitted by ``prefill`` finished (or failed)."""
        self.loads.running -= 1
        if adm is not None:
            self._kv.pop(id(adm), None)

    async def decode(
        self, tokens: Sequence[int], max_new_tokens: int, adm: Admission | None = None
    ) -> AsyncIterator[int]:
        """Generated ids, one per decode step (greedy from the tiny model when there is one)."""
        kv = self._kv.pop(id(adm), None) if adm is not None else None
        m = self.model
        if m is not None and kv is not None and adm is not None:
            logits = adm.logits
            for _ in range(max_new_tokens):
                tok = m.greedy(logits)
                yield tok
                out, step = m.forward([tok], kv)
                kv, logits = m.concat([kv, step]), out[-1]
                await asyncio.sleep(0)
            return
        seed = zlib.crc32(bytes(t & 0xFF for t in tokens[-64:]))
        i, group = 0, 1  # the first token alone (TTFT), then stream_interval at a time
        while i < max_new_tokens:
            k: int = min(group, max_new_tokens - i)
            await asyncio.sleep(self.costs.sleep_s(self.costs.decode_ms_per_token * k))
            for j in range(i, i + k):
                yield 97 + (seed + 7 * j) % 26
            i += k
            group = self.stream_interval

    def export_kv(self, tokens: Sequence[int]) -> tuple[list[int], Tensor | None]:
        """Tokens and KV of the longest cached prefix of ``tokens`` (tiny-llama mode)."""
        assert self.model is not None
        nodes = self.cache.export(tokens)
        if not nodes:
            return [], None
        held = list(tokens[: len(nodes) * self.cache.page_size])
        return held, self.model.concat([n.kv for n in nodes])

    async def import_kv(self, tokens: Sequence[int], kv: Tensor) -> int:
        """Insert copied pages (host tier if there is one); publish their store. Pages held."""
        assert self.model is not None
        p = self.cache.page_size
        n = min(len(tokens) // p, kv.shape[2] // p)
        tier = Tier.DRAM if self.cache.dram_pages > 0 else Tier.VRAM
        kvs = self.model.pages(kv, p, n)
        async with self._gpu:
            events = self.cache.import_pages(tokens[: n * p], kvs, tier)
            if events:
                await self.publisher.publish(events)
        return int(n * p)

    async def flush(self) -> None:
        await self.publisher.publish(self.cache.clear())
