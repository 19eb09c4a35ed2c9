"""``/health`` is answered while 60 oversized requests are in flight (issue 26 item 6).

60 concurrent ``/v1/completions`` with a 3.9 MB text prompt each (all answered 400: over the
context length). The edge's tokenizer is gated: the first prompt it tokenizes waits until the test
opens the gate, so it is certain that a prompt is being tokenized while ``/health`` is asked. Before
the fix the tokenizer ran on the event loop and ``/health`` could not be answered until the gate
gave up (the loop was held); now large bodies are tokenized off the loop, and ``/health`` answers
while the gate is still closed. No timing threshold: the order of events is what is asserted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from edge.tokenizer import ByteTokenizer
from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(300)

N_REQUESTS = 60
PROMPT_CHARS = 3_900_000
GATE_GIVES_UP_S = 30.0


class GatedTokenizer(ByteTokenizer):
    """The byte tokenizer; its first ``encode`` holds until ``gate`` opens (or gives up). It
    claims no useful bound on a token's length, as a tokenizer with very long vocabulary
    entries would, so an oversized text is not refused from its length alone but tokenized
    (then refused): the path that must stay off the loop."""

    max_chars_per_token = 10**9

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.holding = threading.Event()
        self.gave_up = False
        self._first = threading.Lock()

    def encode(self, text: str) -> list[int]:
        if self._first.acquire(blocking=False):
            self.entered.set()
            self.holding.set()
            self.gave_up = not self.gate.wait(GATE_GIVES_UP_S)
            self.holding.clear()
        return super().encode(text)

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return super().chat(messages)


def test_health__answered_while_60_oversized_requests_are_in_flight() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us")
            tok = GatedTokenizer()
            app.tokenizer = tok
            body = {"model": ec.MODEL, "prompt": "a" * PROMPT_CHARS, "max_tokens": 1}

            async def oversized() -> tuple[int, Any]:
                r = await client.post("/v1/completions", json=body)
                return r.status, await r.json()

            tasks = [asyncio.create_task(oversized()) for _ in range(N_REQUESTS)]
            while not tok.entered.is_set():  # a prompt is being tokenized (and held there)
                await asyncio.sleep(0.01)
            r = await client.get("/health")
            health = await r.json()
            held = tok.holding.is_set() and not tok.gave_up  # still inside the tokenizer
            tok.gate.set()
            results = await asyncio.gather(*tasks)
            assert r.status == 200 and held, "/health waited for the tokenizer"
            assert health["open_requests"] >= 1
            assert not tok.gave_up
            assert app.off_loop.offloaded == N_REQUESTS
            for status, out in results:
                assert status == 400 and out["error"]["code"] == "context_length_exceeded"

    asyncio.run(scenario())
