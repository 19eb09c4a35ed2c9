"""The emulated worker's OpenAI routes, in SGLang 0.5.x's shapes: ``/v1/completions``,
``/v1/chat/completions`` (streaming or not) and ``/v1/models``.

Owns the request fields it honours — ``prompt`` (a string, token ids, or a list of either: a batch,
as SGLang's ``serving_completions.py`` serves it, one choice per prompt with ``index`` = its
position, ``usage`` summed) / ``messages`` (content a string or text parts, flattened by
``kvcompass.chat_content`` as SGLang's string content format does), ``max_tokens`` /
``max_completion_tokens``, ``stop`` (a string or up to 4), ``n`` (1 only: 400 otherwise, never a
silent single choice), ``stream``, ``stream_options.include_usage`` — and the response objects
as SGLang's ``serving_chat.py`` / ``serving_completions.py`` build them: a streamed chat opens
with one ``{"role": "assistant", "content": ""}`` delta, then content-only deltas, then a chunk
with ``finish_reason`` (``length`` or ``stop``); ``usage`` rides only in a last chunk with empty
``choices`` and only with ``include_usage``; a whole response always has it.
``usage.prompt_tokens_details.cached_tokens`` only with ``--enable-cache-report`` (else null).

Limits, with SGLang's messages and status (400, ``http_common.openai_error``): an empty prompt
("Prompt cannot be empty", ``OpenAIServingCompletion._validate_request``), no messages
("Messages cannot be empty.", ``OpenAIServingChat._validate_request``), ``max_tokens <= 0`` on
completions (``CompletionRequest.validate_max_tokens_positive``: a validation error, "Bad
Request"), a negative chat ``max_completion_tokens`` (``SamplingParams.verify``), and the context
length (``limits.check_context``). Must not: hold cache or timing logic (``engine``), or serve
SGLang's native routes (``server``).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kvcompass.byte_tokenizer import chat_prompt, detokenize, tokenize
from kvcompass.chat_content import ContentError, text_messages
from workers.emulated.cache import Admission
from workers.emulated.disagg import DISAGG, TransferFailed, bootstrap_of
from workers.emulated.engine import ClientGone
from workers.emulated.http_common import (
    ENGINE,
    INFO,
    BadRequest,
    Invalid,
    Steps,
    aborted,
    cache_salt,
    openai_error,
    run,
    sse,
    token_ids,
)
from workers.emulated.limits import check_context, check_max_new

_Texts = AsyncIterator[tuple[str, str | None]]


@dataclass(frozen=True, slots=True)
class _Ask:
    """One validated OpenAI request (``prompts``: one, or a completions batch)."""

    chat: bool
    prompts: tuple[list[int], ...]
    max_new: int
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    salt: str | None = None
    """``cache_salt``: the cache namespace of every prompt of the request."""


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) for s in stops):
        raise Invalid(f"stop: expected a string or a list of up to 4 strings, got {value!r}")
    return tuple(s for s in stops if s)


def chat_tokens(messages: Any) -> list[int]:
    """The prompt ids of chat messages (text parts flattened; the byte tokenizer's template)."""
    if isinstance(messages, list) and not messages:
        raise BadRequest("Messages cannot be empty.")
    try:
        return tokenize(chat_prompt(text_messages(messages)))
    except ContentError as exc:
        raise Invalid(str(exc)) from None


def _prompts(prompt: Any) -> tuple[list[int], ...]:
    """SGLang's ``CompletionRequest.prompt``: ``str | list[int] | list[str] | list[list[int]]``."""
    if not prompt or (isinstance(prompt, list) and all(not p for p in prompt)):
        raise BadRequest("Prompt cannot be empty")
    if isinstance(prompt, str):
        return (tokenize(prompt),)
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return tuple(tokenize(p) for p in prompt)
    if isinstance(prompt, list) and all(isinstance(p, list) for p in prompt):
        return tuple(token_ids(p, "prompt") for p in prompt)
    return (token_ids(prompt, "prompt"),)


def _parse(body: Any, chat: bool, context_len: int) -> _Ask:
    if not isinstance(body, dict):
        raise Invalid("body: expected a JSON object")
    prompts: tuple[list[int], ...]
    if chat:
        prompts = (chat_tokens(body.get("messages")),)
        asked = body.get("max_completion_tokens") or body.get("max_tokens")  # SGLang's `or`
        check_max_new(asked)
        max_new = 16 if asked is None else asked
    else:
        prompts = _prompts(body.get("prompt"))
        asked = body.get("max_tokens", 16)
        if asked is not None and (type(asked) is not int or asked <= 0):
            raise Invalid(f"max_tokens: Value error, max_tokens must be positive, got {asked!r}")
        max_new = asked if asked is not None else 16
    for p in prompts:
        check_context(len(p), asked, context_len)
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise BadRequest(f"n: the emulated worker serves one choice per request, got {n!r}")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise Invalid("stream_options: expected an object")
    return _Ask(chat, prompts, max_new, _stop(body.get("stop")), bool(body.get("stream")),
                bool(opts.get("include_usage")), cache_salt(body))  # fmt: skip


async def _texts(steps: Steps, stop: tuple[str, ...], out: list[int]) -> _Texts:
    """(new text, finish reason or None) per decode step, the generated ids appended to ``out``;
    a stop string ends the output before it (OpenAI: the stop sequence is not returned)."""
    sent = 0
    async for t in steps:
        out.append(t)
        text = detokenize(out)
        cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
        if cut >= 0:
            steps.stop()
            yield text[sent:cut], "stop"
            return
        # hold back what could still become a stop string's start
        hold = max((len(s) - 1 for s in stop), default=0)
        safe = max(sent, len(text) - hold)
        yield text[sent:safe], None
        sent = safe
    yield detokenize(out)[sent:], "length"


async def _merged(texts: list[_Texts]) -> AsyncIterator[tuple[int, str, str | None]]:
    """(choice index, text, finish) of every prompt of a batch, as their steps come."""
    if len(texts) == 1:
        async for text, finish in texts[0]:
            yield 0, text, finish
        return
    queue: asyncio.Queue[tuple[int, str, str | None] | Exception | None] = asyncio.Queue()

    async def pump(i: int, it: _Texts) -> None:
        try:
            async for text, finish in it:
                await queue.put((i, text, finish))
            await queue.put(None)
        except Exception as exc:  # re-raised in the consumer
            await queue.put(exc)

    tasks = [asyncio.create_task(pump(i, it)) for i, it in enumerate(texts)]
    try:
        left = len(tasks)
        while left:
            item = await queue.get()
            if item is None:
                left -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:  # the steps are closed after this: no pump may still be inside one
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _usage(adms: list[Admission], n: int, cache_report: bool) -> dict[str, Any]:
    prompt = sum(a.prompt_tokens for a in adms)
    details = {"cached_tokens": sum(a.cached_tokens for a in adms)} if cache_report else None
    return {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n,
            "prompt_tokens_details": details}  # fmt: skip


async def openai(request: web.Request) -> web.StreamResponse:
    chat = request.path.endswith("/chat/completions")
    rid = request.headers.get("X-Request-Id", uuid.uuid4().hex)
    info = request.app[INFO]
    disagg = request.app[DISAGG]
    try:
        body = await request.json()
        ask = _parse(body, chat, int(info["context_length"]))
        bootstrap = bootstrap_of(body, disagg.mode)
        if bootstrap is not None and len(ask.prompts) > 1:
            raise Invalid("a batch of prompts in PD mode: send one prompt per request")
    except (Invalid, json.JSONDecodeError) as exc:
        return openai_error(str(exc), rid, err_type="Bad Request")
    except BadRequest as exc:
        return openai_error(str(exc), rid)
    model, report = str(info["served_model_name"]), bool(info["enable_cache_report"])
    engine = request.app[ENGINE]
    adms: list[Admission] = []
    runs: list[Steps] = []
    try:
        max_new = disagg.max_new(ask.max_new)
        for tokens in ask.prompts:  # one prefill queue: a batch's prompts take it in order
            pd = (disagg, bootstrap)
            adm, steps = await run(engine, tokens, max_new, request, rid, pd, ask.salt, ask.stream)
            adms.append(adm)
            runs.append(steps)
        generated: list[list[int]] = [[] for _ in runs]
        texts = [_texts(s, ask.stop, g) for s, g in zip(runs, generated, strict=True)]
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + rid, "created": int(time.time()),
                "model": model}  # fmt: skip
        if ask.stream:
            return await sse(request, _chunks(request, ask, head, adms, texts, generated, report))
        parts: list[list[tuple[str, str | None]]] = [[] for _ in runs]
        async for i, text, finish in _merged(texts):
            parts[i].append((text, finish))
    except ClientGone as exc:
        return aborted(exc, rid, openai=True)
    except TransferFailed as exc:
        return openai_error(str(exc), rid, status=500, err_type="InternalServerError")
    finally:  # a client that left mid-stream: every request is done (running count, KV)
        for steps in runs:
            await steps.aclose()
    kind = "chat.completion" if chat else "text_completion"
    choices = [_choice(chat, i, "".join(t for t, _ in p), p[-1][1], None)
               for i, p in enumerate(parts)]  # fmt: skip
    n_out = sum(len(g) for g in generated)
    return web.json_response(
        {**head, "object": kind, "choices": choices, "usage": _usage(adms, n_out, report)},
        headers={"X-Request-Id": rid},
    )


def _choice(
    chat: bool, index: int, text: str, finish: str | None, delta: dict[str, Any] | None
) -> dict[str, Any]:
    c: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": None}
    if not chat:
        c["text"] = text
    elif delta is not None:
        c["delta"] = delta
    else:
        c["message"] = {"role": "assistant", "content": text}
    return c


async def _chunks(
    request: web.Request,
    ask: _Ask,
    head: dict[str, Any],
    adms: list[Admission],
    texts: list[_Texts],
    generated: list[list[int]],
    report: bool,
) -> AsyncIterator[dict[str, Any]]:
    chat = ask.chat
    obj = "chat.completion.chunk" if chat else "text_completion"
    if chat:
        first = {"role": "assistant", "content": ""}
        yield {**head, "object": obj, "choices": [_choice(chat, 0, "", None, first)]}
    every = request.app[ENGINE].stream_interval  # SGLang's --stream-interval
    pending = [""] * len(texts)
    async for i, text, finish in _merged(texts):
        pending[i] += text
        n = len(generated[i])
        if finish is None and n != 1 and (n - 1) % every:
            continue
        if pending[i] or finish:
            delta = {"content": pending[i]} if pending[i] else {}
            yield {**head, "object": obj, "choices": [_choice(chat, i, pending[i], finish, delta)]}
        pending[i] = ""
    if ask.include_usage:
        usage = _usage(adms, sum(len(g) for g in generated), report)
        yield {**head, "object": obj, "choices": [], "usage": usage}


async def models(request: web.Request) -> web.Response:
    """``ModelList`` of one ``ModelCard`` (SGLang: id, object, created, owned_by, root,
    ``max_model_len`` = the context length)."""
    info = request.app[INFO]
    card = {"id": info["served_model_name"], "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": info["model_path"], "parent": None,
            "max_model_len": info["context_length"]}  # fmt: skip
    return web.json_response({"object": "list", "data": [card]})
