"""The edge always streams from the worker (issue 34 item 2); a client that did not ask for a
stream gets the body the worker would have returned unstreamed, assembled by the edge.

Two fresh emulated workers of region us: the edge serves on worker 0 only, the reference request
goes straight to worker 1 (same prompt, same cold cache, so the same ``cached_tokens``). Bodies are
compared whole, after removing what differs between any two requests (``id``, ``created``,
``meta_info.id``, ``meta_info.e2e_latency``). Both client kinds: the official ``openai`` client
(completions and chat, whole and streamed) and SGLang's ``/generate`` (with and without stream).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(120)
PROMPT = "Every request streams from its worker; the edge assembles whole bodies. " * 3


def _norm(body: Any) -> Any:
    """``body`` without what differs between two requests to the same cold worker."""
    if isinstance(body, list):
        return [_norm(b) for b in body]
    out = {k: v for k, v in body.items() if k not in ("id", "created")}
    if isinstance(out.get("meta_info"), dict):
        out["meta_info"] = {k: v for k, v in out["meta_info"].items()
                            if k not in ("id", "e2e_latency")}  # fmt: skip
    return out


def _sse(raw: bytes) -> list[Any]:
    return [json.loads(ev[6:]) for ev in raw.split(b"\n\n") if ev.startswith(b"data: {")]


def test_whole_and_streamed__the_bodies_the_worker_returns() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            edge_app, edge = await c.add_edge("us", only_workers=[0], max_context_tokens=4096)
            direct = c.workers[1].url
            cls = [openai.AsyncOpenAI(base_url=u, api_key="none", max_retries=0)
                   for u in (str(edge.make_url("/v1")), direct + "/v1")]  # fmt: skip
            try:
                # openai client, whole: identical bodies (completions, then chat)
                got, want = [
                    (await cl.completions.create(model=ec.MODEL, prompt=PROMPT,
                                                 max_tokens=7)).model_dump()
                    for cl in cls
                ]  # fmt: skip
                assert _norm(got) == _norm(want) and got["object"] == "text_completion"
                assert got["usage"]["completion_tokens"] == 7
                chat: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
                got, want = [
                    (await cl.chat.completions.create(model=ec.MODEL, messages=chat,
                                                      max_tokens=6)).model_dump()
                    for cl in cls
                ]  # fmt: skip
                assert _norm(got) == _norm(want) and got["object"] == "chat.completion"
                # openai client, streamed: the same text as the whole answer
                chunks = [ch async for ch in await cls[0].completions.create(
                    model=ec.MODEL, prompt=PROMPT, max_tokens=7, stream=True)]  # fmt: skip
                whole = await cls[1].completions.create(model=ec.MODEL, prompt=PROMPT, max_tokens=7)
                assert "".join(ch.choices[0].text for ch in chunks) == whole.choices[0].text
            finally:
                for cl in cls:
                    await cl.close()
            async with aiohttp.ClientSession() as http:
                for stream in (False, True):
                    ids = list(range(40, 140 + int(stream)))  # a new prompt: cold on both
                    req = {"input_ids": ids, "sampling_params": {"max_new_tokens": 5},
                           "stream": stream}  # fmt: skip
                    r = await edge.post("/generate", json=req)
                    async with http.post(direct + "/generate", json=req) as d:
                        want_raw = await d.read()
                    got_raw = await r.read()
                    assert r.status == 200
                    if stream:
                        assert r.content_type == "text/event-stream"
                        assert _norm(_sse(got_raw)) == _norm(_sse(want_raw))
                    else:
                        assert r.content_type == "application/json"
                        assert _norm(json.loads(got_raw)) == _norm(json.loads(want_raw))
            # every request was answered at its first chunk: nothing left open in the decider
            assert edge_app.service.metrics.get("requests_total", endpoint="generate",
                                                status=200) == 2  # fmt: skip

    asyncio.run(scenario())
