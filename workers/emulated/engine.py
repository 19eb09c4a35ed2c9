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
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcompass.types import Tier
from workers.emulated.cache import Admission, Node, PrefixCache
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
    prefill_cached_tokens: int = 0
    prefill_prompt_tokens: int = 0
    waiting_prompt_tokens: int = 0
    last_prefill_cached_tokens: int = 0
    last_prefill_prompt_tokens: int = 0
    """The last prefill's cached and prompt tokens: SGLang's ``cache_hit_rate`` gauge is the hit
    rate of the last prefill batch it logged (``metrics_reporter.py``); here one prefill is one
    batch."""


@dataclass(slots=True, eq=False)
class _Running:
    """What one running request holds of the KV pool: its prompt's pages in the tree (shared
    with others that matched them) and the tokens allocated outside the tree (the prompt's
    partial last page, then every decoded token)."""

    nodes: tuple[Node, ...]
    prompt_tokens: int
    decoded: int = 0


ABORT_POLL_MS = 4000.0
"""How often a waiting request's client is checked (SGLang: ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT``,
4 s, in ``TokenizerManager._wait_one_response``); model ms, scaled like every other sleep."""


class ClientGone(Exception):
    """The HTTP client of a request left: the request was aborted (waiting or running)."""


class Engine:
    def __init__(
        self,
        cache: PrefixCache,
        costs: EmulatedCosts,
        publisher: EventPublisher,
        model: TinyLlama | None = None,
        stream_interval: int = 1,
        chunked_prefill_size: int = 4096,
    ) -> None:
        self.cache = cache
        self.chunked_prefill_size = max(int(chunked_prefill_size), 1)
        """SGLang's ``--chunked-prefill-size`` (4096 on a 32 GB GPU such as the RTX 5090, SGLang
        0.5.23's ``arg_groups/memory_hook.py``): what ``waiting_uncached_tokens`` counts of a
        running prefill."""
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
        self._running: dict[int, _Running] = {}  # by id(adm) of the admission ``prefill`` returned

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
        self,
        tokens: Sequence[int],
        disconnected: Callable[[], bool] | None = None,
        salt: str | None = None,
    ) -> Admission:
        """Queue, then prefill ``tokens``; the request counts as running until ``finish``.

        ``disconnected``: asked every ``ABORT_POLL_MS`` (model ms) while the request waits in the
        queue; true aborts it (``ClientGone``) before it takes the GPU, as SGLang's tokenizer
        manager aborts a waiting request whose HTTP client left (it polls every
        ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT`` = 4 s). Without it, requests a client gave up on
        (a hot-spotted worker's queue) kept the worker busy for minutes after the load stopped."""
        dev, host = self.cache.match(tokens, salt)
        estimate = max(len(tokens) - dev - host, 0)
        loads = self.loads
        loads.waiting += 1
        loads.waiting_uncached_tokens += estimate
        loads.waiting_prompt_tokens += len(tokens)
        try:
            await self._queue(disconnected)
        finally:
            loads.waiting -= 1
            loads.waiting_uncached_tokens -= estimate
            loads.waiting_prompt_tokens -= len(tokens)
        loads.running += 1
        loads.requests += 1
        adm = self.cache.admit(tokens, salt)
        run = _Running((*adm.reused, *adm.fresh), adm.prompt_tokens)
        self._running[id(adm)] = run
        try:
            uncached = adm.prompt_tokens - adm.cached_tokens
            model_ms = self.costs.prefill_ms(uncached, adm.host_hit_tokens)
            self._in_prefill = (uncached, time.perf_counter(), self.costs.sleep_s(model_ms))
            if adm.events:  # the cache already changed: publish even if the client goes away
                await self.publisher.publish(adm.events)
            if self.model is not None and tokens:
                del self._running[id(adm)]
                adm, model_ms = self._compute(tokens, adm)  # real compute is the cost
                self._running[id(adm)] = run
            else:
                await asyncio.sleep(self.costs.sleep_s(model_ms))
            loads.prefill_busy_us += int(model_ms * 1000)
            loads.prefill_uncached_tokens += uncached
            loads.prefill_cached_tokens += adm.cached_tokens
            loads.prefill_prompt_tokens += adm.prompt_tokens
            loads.last_prefill_cached_tokens = adm.cached_tokens
            loads.last_prefill_prompt_tokens = adm.prompt_tokens
            return adm
        except BaseException:  # cancelled mid-prefill (shutdown): the request is over
            self.done(adm)
            raise
        finally:
            self._in_prefill = None
            self._gpu.release()

    async def receive(
        self, tokens: Sequence[int], transfer_s: Callable[[], Awaitable[tuple[float, int]]]
    ) -> Admission:
        """Decode mode (PD): the prompt's KV comes from a prefill worker instead of this GPU.
        The request counts as running from arrival (SGLang's decode reserves its KV then, the
        ``early`` policy) and holds its prompt's pages outside the tree (the decode radix cache
        is off); ``transfer_s`` waits for the prefill and returns the wall seconds the transfer
        takes (slept here) and the tokens the prefill found cached (reported as this request's
        ``cached_tokens``, as SGLang's decode does). No prefill queue, no KV events."""
        self.loads.running += 1
        self.loads.requests += 1
        adm = Admission(len(tokens), 0, 0, 0, [])
        self._running[id(adm)] = _Running((), len(tokens))
        try:
            seconds, cached = await transfer_s()
            await asyncio.sleep(seconds)
        except BaseException:
            self.done(adm)
            raise
        got = dataclasses.replace(adm, device_hit_tokens=min(max(cached, 0), len(tokens)))
        self._running[id(got)] = self._running.pop(id(adm))
        return got

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
        """SGLang 0.5.23's ``num_waiting_uncached_tokens``
        (``scheduler_components/load_inquirer.py::get_num_waiting_uncached_tokens``): the queue's
        uncached tokens, plus, while a prefill longer than one chunk is SGLang's ``chunked_req``
        (until its last chunk starts), its tokens not prefilled yet (``seqlen - prefix_len``,
        whole chunks done so far, chunks taking equal time); a one-chunk prefill, and the last
        chunk of a longer one, are not counted while they run. The simulator's reports follow the
        same rule (``sim/engine/loads.py``)."""
        n = self.loads.waiting_uncached_tokens
        cur = self._in_prefill
        if cur is not None:
            uncached, started, duration_s = cur
            chunk = self.chunked_prefill_size
            n_chunks = max(-(-uncached // chunk), 1)
            frac = (time.perf_counter() - started) / duration_s if duration_s > 0 else 1.0
            done = min(int(frac * n_chunks), n_chunks)
            if done < n_chunks - 1:  # still the chunked_req: its last chunk has not started
                n += uncached - done * chunk
        return n

    def waiting_prompt_tokens(self) -> int:
        """Prompt tokens of the queued requests (SGLang's ``num_total_tokens`` adds them)."""
        return self.loads.waiting_prompt_tokens

    def done(self, adm: Admission | None = None) -> None:
        """The request admitted by ``prefill`` finished (or failed)."""
        self.loads.running -= 1
        if adm is not None:
            self._kv.pop(id(adm), None)
            self._running.pop(id(adm), None)

    def kv_used_tokens(self) -> int:
        """Tokens of the VRAM pool that cannot be evicted now, as SGLang counts them
        (``SchedulerPoolStatsObserver._get_token_info``: ``max_total_num_tokens - (available +
        evictable)``): the tree pages that running requests hold (each page once), plus what each
        running request holds outside the tree (``kv_private_tokens``: its allocation rounded up
        to pages, less its pages in the tree). Cached pages nobody holds are evictable and do not
        count: an idle worker full of cache reports 0, as SGLang does. At most the capacity
        (the emulated cache may run over it; SGLang's allocator cannot)."""
        return self.kv_token_stats()[0]

    def kv_token_stats(self) -> tuple[int, int, int]:
        """(used, evictable, available) tokens of the VRAM pool, SGLang's split
        (``sglang:kv_used_tokens`` / ``kv_evictable_tokens`` / ``kv_available_tokens``): used as
        ``kv_used_tokens``; evictable = cached VRAM pages no running request holds; available =
        the rest of the capacity. Each at least 0, together at most the capacity."""
        p = self.cache.page_size
        cap = self.cache.vram_pages * p
        held: set[int] = set()
        private = 0
        for run in self._running.values():
            held.update(id(n) for n in run.nodes if n.tier is Tier.VRAM)
            allocated = -(-(run.prompt_tokens + run.decoded) // p) * p
            private += allocated - len(run.nodes) * p
        used = min(len(held) * p + private, cap)
        evictable = min(max(self.cache.usage_tokens(Tier.VRAM) - len(held) * p, 0), cap - used)
        return used, evictable, cap - used - evictable

    async def decode(
        self, tokens: Sequence[int], max_new_tokens: int, adm: Admission | None = None
    ) -> AsyncIterator[int]:
        """Generated ids, one per decode step (greedy from the tiny model when there is one)."""
        kv = self._kv.pop(id(adm), None) if adm is not None else None
        run = self._running.get(id(adm)) if adm is not None else None
        m = self.model
        if m is not None and kv is not None and adm is not None:
            logits = adm.logits
            for _ in range(max_new_tokens):
                tok = m.greedy(logits)
                if run is not None:
                    run.decoded += 1
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
                if run is not None:
                    run.decoded += 1
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
