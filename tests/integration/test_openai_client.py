"""The official ``openai`` Python client against the edge (and the emulated worker behind it):
completions and chat, streaming or not; usage only with ``stream_options.include_usage``, in a last
chunk with empty ``choices``; ``n`` refused with 400 rather than silently answered once; ``stop``
honoured; ``role`` only in a chat stream's first delta; ``/v1/models`` cards; the errors (404
unknown model, 400 bad body, 413 too large, 400 context length); OpenAI's full request shapes (text
content parts, prompt lists) and guidellm's default chat body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.client_shapes import guidellm_chat
from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(120)
PROMPT = "The discovery plane finds a reusable prefix anywhere. " * 4
CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]


def _with_clients(body: Callable[[list[openai.AsyncOpenAI]], Awaitable[None]]) -> None:
    """``body`` gets a client of the edge and one of a worker (both must satisfy the client)."""

    async def scenario() -> None:
        async with ec.cluster() as c:
            _, edge = await c.add_edge("us", max_body_bytes=64 * 1024, max_context_tokens=2048)
            clients = [
                openai.AsyncOpenAI(base_url=str(edge.make_url("/v1")), api_key="none",
                                   max_retries=0),
                openai.AsyncOpenAI(base_url=c.workers[0].url + "/v1", api_key="none",
                                   max_retries=0),
            ]  # fmt: skip
            try:
                await body(clients)
            finally:
                for cl in clients:
                    await cl.close()

    asyncio.run(scenario())


def test_completions__whole_and_streamed_usage_only_when_asked() -> None:
    async def body(clients: list[openai.AsyncOpenAI]) -> None:
        for cl in clients:
            whole = await cl.completions.create(model=ec.MODEL, prompt=PROMPT, max_tokens=6)
            assert len(whole.choices) == 1 and whole.choices[0].finish_reason == "length"
            assert whole.usage is not None and whole.usage.completion_tokens == 6
            assert whole.usage.prompt_tokens_details is not None
            assert isinstance(whole.usage.prompt_tokens_details.cached_tokens, int)
            chunks = [ch async for ch in await cl.completions.create(
                model=ec.MODEL, prompt=PROMPT, max_tokens=6, stream=True)]  # fmt: skip
            assert all(ch.usage is None for ch in chunks)
            assert "".join(ch.choices[0].text for ch in chunks) == whole.choices[0].text
            assert chunks[-1].choices[0].finish_reason == "length"
            asked = [ch async for ch in await cl.completions.create(
                model=ec.MODEL, prompt=PROMPT, max_tokens=6, stream=True,
                stream_options={"include_usage": True})]  # fmt: skip
            last = asked[-1]
            assert last.choices == [] and last.usage is not None
            assert last.usage.completion_tokens == 6
            assert all(ch.usage is None for ch in asked[:-1])

    _with_clients(body)


def test_chat__role_only_in_first_delta_and_usage_chunk() -> None:
    async def body(clients: list[openai.AsyncOpenAI]) -> None:
        for cl in clients:
            whole = await cl.chat.completions.create(model=ec.MODEL, messages=CHAT, max_tokens=5)
            msg = whole.choices[0].message
            assert msg.role == "assistant" and msg.content and whole.usage is not None
            stream = await cl.chat.completions.create(
                model=ec.MODEL, messages=CHAT, max_tokens=5, stream=True,
                stream_options={"include_usage": True})  # fmt: skip
            chunks = [ch async for ch in stream]
            deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
            assert deltas[0].role == "assistant"
            assert all(d.role is None for d in deltas[1:])
            assert "".join(d.content or "" for d in deltas) == msg.content
            assert chunks[-1].choices == [] and chunks[-1].usage is not None
            assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"

    _with_clients(body)


def test_stop_is_honoured_and_n_is_refused__not_silently_one_choice() -> None:
    async def body(clients: list[openai.AsyncOpenAI]) -> None:
        for cl in clients:
            full = (await cl.completions.create(model=ec.MODEL, prompt=PROMPT,
                                                max_tokens=12)).choices[0].text  # fmt: skip
            stop = full[4:6]
            cut = await cl.completions.create(model=ec.MODEL, prompt=PROMPT, max_tokens=12,
                                              stop=[stop])  # fmt: skip
            assert cut.choices[0].text == full[: full.find(stop)]
            assert cut.choices[0].finish_reason == "stop"
            reply = await cl.chat.completions.create(model=ec.MODEL, messages=CHAT, max_tokens=12)
            said = reply.choices[0].message.content
            assert said is not None
            it = await cl.chat.completions.create(
                model=ec.MODEL, messages=CHAT, max_tokens=12, stop=said[4:6], stream=True
            )
            streamed = [ch async for ch in it]
            text = "".join(ch.choices[0].delta.content or "" for ch in streamed if ch.choices)
            assert text == said[: said.find(said[4:6])]
            assert streamed[-1].choices[0].finish_reason == "stop"
            with pytest.raises(openai.BadRequestError):
                await cl.completions.create(model=ec.MODEL, prompt=PROMPT, max_tokens=2, n=2)

    _with_clients(body)


def test_models_and_errors__404_400_413_context_length() -> None:
    async def body(clients: list[openai.AsyncOpenAI]) -> None:
        for cl in clients:
            (card,) = (await cl.models.list()).data
            assert card.id == ec.MODEL and card.created > 0 and card.owned_by
        edge = clients[0]
        with pytest.raises(openai.NotFoundError):
            await edge.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2)
        with pytest.raises(openai.BadRequestError):
            await edge.completions.create(model=ec.MODEL, prompt=PROMPT, max_tokens=-1)
        with pytest.raises(openai.APIStatusError) as too_big:
            await edge.completions.create(model=ec.MODEL, prompt="x" * 70_000, max_tokens=2)
        assert too_big.value.status_code == 413
        with pytest.raises(openai.BadRequestError) as too_long:
            await edge.completions.create(model=ec.MODEL, prompt="y" * 3000, max_tokens=2)
        err: Any = too_long.value.body
        assert err["code"] == "context_length_exceeded"

    _with_clients(body)


def test_full_request_shapes__text_parts_and_prompt_lists() -> None:
    """OpenAI's content-part form of a chat turn (what guidellm sends) reads as the same text;
    another part type is a 400 naming it; a list of one prompt is that prompt. A list of several
    is a batch at the worker (SGLang serves it) and a 400 saying why at the edge (one route per
    request)."""
    parts: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": [{"type": "text", "text": PROMPT}]}
    ]
    image: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}
    ]  # fmt: skip

    async def body(clients: list[openai.AsyncOpenAI]) -> None:
        for cl in clients:
            plain = await cl.chat.completions.create(model=ec.MODEL, messages=CHAT, max_tokens=5)
            split = await cl.chat.completions.create(model=ec.MODEL, messages=parts, max_tokens=5)
            assert split.choices[0].message.content == plain.choices[0].message.content
            assert split.usage is not None and plain.usage is not None
            assert split.usage.prompt_tokens == plain.usage.prompt_tokens
            with pytest.raises(openai.BadRequestError) as bad:
                await cl.chat.completions.create(model=ec.MODEL, messages=image, max_tokens=5)
            assert "image_url" in str(bad.value)
            one = await cl.completions.create(model=ec.MODEL, prompt=[PROMPT], max_tokens=4)
            assert len(one.choices) == 1 and one.usage is not None
            assert one.usage.completion_tokens == 4
        edge, worker = clients
        batch = await worker.completions.create(model=ec.MODEL, prompt=[PROMPT, "other"],
                                                max_tokens=3)  # fmt: skip
        assert [c.index for c in batch.choices] == [0, 1]
        with pytest.raises(openai.BadRequestError) as several:
            await edge.completions.create(model=ec.MODEL, prompt=[PROMPT, "other"], max_tokens=3)
        assert "one prompt per request" in str(several.value)

    _with_clients(body)


def test_guidellm_default_chat_request__streams_with_usage_through_edge_and_worker() -> None:
    """guidellm 0.8.1's exact chat body (``tests/client_shapes.py``), as raw JSON: 200, content
    deltas, and the final usage chunk it reads (issue 30: 100 of 100 were refused)."""

    async def body(clients: list[openai.AsyncOpenAI]) -> None:
        async with aiohttp.ClientSession() as s:
            for cl in clients:
                url = str(cl.base_url).rstrip("/") + "/chat/completions"
                req = guidellm_chat(ec.MODEL, PROMPT, output_tokens=6)
                chunks = []
                async with s.post(url, json=req) as r:
                    assert r.status == 200, await r.text()
                    async for line in r.content:
                        data = line.strip()
                        if data.startswith(b"data:") and data[5:].strip() != b"[DONE]":
                            chunks.append(json.loads(data[5:]))
                text = "".join(c["choices"][0]["delta"].get("content") or ""
                               for c in chunks if c["choices"])  # fmt: skip
                assert text and chunks[-1]["choices"] == []
                assert chunks[-1]["usage"]["completion_tokens"] == 6

    _with_clients(body)
