"""Parsing and tokenizing large request bodies off the event loop, a bounded few at a time.

Owns ``OffLoop``: bodies up to ``INLINE_BYTES`` are parsed where they are (a few hundred µs at
most: not worth a thread hop); larger ones run in a small thread pool, at most ``threads`` at
once, the others waiting (cancellably) for a slot. Must not know request shapes or HTTP: it runs
the function it is given.

Why (issue 26 item 6): 60 concurrent 3.9 MB prompts, each answered 400, held ``/health`` for
3.5 s, because every body was decoded and tokenized on the event loop (msgspec decode, then the
tokenizer, then numpy) before the context-length check could refuse it. The size limit before any
parsing stays where it was (``edge.handlers.read_body``: ``Content-Length`` over
``max_body_bytes`` is a 413 before a byte is read, a chunked body is cut there too). What a
thread cannot do is release the GIL for pure-Python work; it does not have to: the interpreter
hands the GIL over every switch interval (5 ms), so the loop keeps answering while a large body
is parsed, and the semaphore keeps a flood of large bodies from taking every core.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

INLINE_BYTES = 32 * 1024
"""Bodies up to this size are parsed on the loop (a 32 KiB prompt tokenizes in well under 1 ms
with the byte tokenizer, a few ms with a Hugging Face one)."""


class OffLoop:
    """A bounded parse pool for one edge process."""

    def __init__(self, threads: int = 1) -> None:
        if threads < 1:
            raise ValueError(f"threads: expected >= 1, got {threads}")
        self.threads = threads
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="edge-parse")
        self._slots: asyncio.Semaphore | None = None
        self.offloaded = 0
        """Bodies parsed in the pool so far (tests and ``/metrics`` read it)."""

    async def run(self, size_bytes: int, fn: Callable[[], T]) -> T:
        """``fn()`` on the loop for a small body, else in the pool once a slot is free."""
        if size_bytes <= INLINE_BYTES:
            return fn()
        if self._slots is None:  # created in the loop that uses it
            self._slots = asyncio.Semaphore(self.threads)
        slots = self._slots
        await slots.acquire()
        self.offloaded += 1
        # the slot is freed when the thread is done, not when the caller stops waiting (a client
        # that leaves cannot queue more work behind the pool than it has threads)
        fut = asyncio.get_running_loop().run_in_executor(self._pool, fn)
        fut.add_done_callback(lambda _: slots.release())
        return await asyncio.shield(fut)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
