"""The emulated worker's OpenAI routes, in SGLang 0.5.x's shapes: ``/v1/completions``,
``/v1/chat/completions`` (streaming or not) and ``/v1/models``.

Owns the request fields it honours — ``prompt`` (string or token ids) / ``messages``,
``max_tokens`` / ``max_completion_tokens``, ``stop`` (a string or up to 4), ``n`` (1 only: 400
otherwise, never a silent single choice), ``stream``, ``stream_options.include_usage`` — and the
response objects as SGLang's ``serving_chat.py`` / ``serving_completions.py`` build them: a
streamed chat opens with one ``{"role": "assistant", "content": ""}`` delta, then content-only
deltas, then a chunk with ``finish_reason`` (``length`` or ``stop``); ``usage`` rides only in a
last chunk with empty ``choices`` and only with ``include_usage``; a whole response always has it.
``usage.prompt_tokens_details.cached_tokens`` only with ``--enable-cache-report`` (else null).
Must not: hold cache or timing logic (``engine``), or serve SGLang's native routes (``server``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kvcompass.byte_tokenizer import chat_prompt, detokenize, tokenize
from workers.emulated.cache import Admission
from workers.emulated.engine import ClientGone
from workers.emulated.http_common import (
    ENGINE,
    INFO,
    BadRequest,
    Steps,
    aborted,
    error,
    parse_max_new,
    run,
    sse,
    token_ids,
)


@dataclass(frozen=True, slots=True)
class _Ask:
    """One validated OpenAI request."""

    chat: bool
    tokens: list[int]
    max_new: int
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 4 or not all(isinstance(s, str) for s in stops):
        raise BadRequest(f"stop: expected a string or a list of up to 4 strings, got {value!r}")
    return tuple(s for s in stops if s)


def chat_tokens(messages: Any) -> list[int]:
    """The prompt ids of string-content chat messages (the byte tokenizer's chat template)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: expected a non-empty list")
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str):
            raise BadRequest("messages: expected objects with string 'role' and 'content'")
    return tokenize(chat_prompt(messages))


def _parse(body: Any, chat: bool) -> _Ask:
    if not isinstance(body, dict):
        raise BadRequest("body: expected a JSON object")
    if chat:
        tokens = chat_tokens(body.get("messages"))
    else:
        prompt = body.get("prompt")
        tokens = tokenize(prompt) if isinstance(prompt, str) else token_ids(prompt, "prompt")
    n = body.get("n", 1)
    if n != 1 or isinstance(n, bool):
        raise BadRequest(f"n: the emulated worker serves one choice per request, got {n!r}")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise BadRequest("stream_options: expected an object")
    return _Ask(
        chat,
        tokens,
        parse_max_new(body.get("max_completion_tokens", body.get("max_tokens")), 16),
        _stop(body.get("stop")),
        bool(body.get("stream")),
        bool(opts.get("include_usage")),
    )


async def _texts(
    steps: Steps, stop: tuple[str, ...], out: list[int]
) -> AsyncIterator[tuple[str, str | None]]:
    """(new text, finish reason or None) per decode step, the generated ids appended to ``out``;
    a stop string ends the output before it (OpenAI: the stop sequence is not returned)."""
    sent = 0
    async for t in steps:
        out.append(t)
        text = detokenize(out)
        cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
        if cut >= 0:
            yield text[sent:cut], "stop"
            return
        # hold back what could still become a stop string's start
        hold = max((len(s) - 1 for s in stop), default=0)
        safe = max(sent, len(text) - hold)
        yield text[sent:safe], None
        sent = safe
    yield detokenize(out)[sent:], "length"


def _usage(adm: Admission, n: int, cache_report: bool) -> dict[str, Any]:
    details = {"cached_tokens": adm.cached_tokens} if cache_report else None
    return {
        "prompt_tokens": adm.prompt_tokens,
        "completion_tokens": n,
        "total_tokens": adm.prompt_tokens + n,
        "prompt_tokens_details": details,
    }


async def openai(request: web.Request) -> web.StreamResponse:
    chat = request.path.endswith("/chat/completions")
    rid = request.headers.get("X-Request-Id", uuid.uuid4().hex)
    try:
        ask = _parse(await request.json(), chat)
    except (BadRequest, json.JSONDecodeError) as exc:
        return error(400, str(exc), rid)
    info = request.app[INFO]
    model, report = str(info["served_model_name"]), bool(info["enable_cache_report"])
    try:
        adm, steps = await run(request.app[ENGINE], ask.tokens, ask.max_new, request)
    except ClientGone:
        return aborted(rid)
    head = {"id": ("chatcmpl-" if chat else "cmpl-") + rid, "created": int(time.time()),
            "model": model}  # fmt: skip
    kind = "chat.completion" if chat else "text_completion"
    generated: list[int] = []

    def choice(text: str, finish: str | None, delta: dict[str, Any] | None) -> dict[str, Any]:
        c: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if not chat:
            c["text"] = text
        elif delta is not None:
            c["delta"] = delta
        else:
            c["message"] = {"role": "assistant", "content": text}
        return c

    if ask.stream:
        obj = kind + ".chunk" if chat else kind

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            if chat:
                first = {"role": "assistant", "content": ""}
                yield {**head, "object": obj, "choices": [choice("", None, first)]}
            every = request.app[ENGINE].stream_interval  # SGLang's --stream-interval
            pending = ""
            async for text, finish in _texts(steps, ask.stop, generated):
                pending += text
                n = len(generated)
                if finish is None and n != 1 and (n - 1) % every:
                    continue
                if pending or finish:
                    c = choice(pending, finish, {"content": pending} if pending else {})
                    yield {**head, "object": obj, "choices": [c]}
                pending = ""
            if ask.include_usage:
                usage = _usage(adm, len(generated), report)
                yield {**head, "object": obj, "choices": [], "usage": usage}

        try:
            return await sse(request, chunks())
        finally:  # a client that left mid-stream: the request is done (running count, KV)
            await steps.aclose()
    try:
        parts = [p async for p in _texts(steps, ask.stop, generated)]
    finally:
        await steps.aclose()
    text = "".join(t for t, _ in parts)
    return web.json_response(
        {**head, "object": kind, "choices": [choice(text, parts[-1][1], None)],
         "usage": _usage(adm, len(generated), report)},
        headers={"X-Request-Id": rid},
    )  # fmt: skip


async def models(request: web.Request) -> web.Response:
    """``ModelList`` of one ``ModelCard`` (SGLang: id, object, created, owned_by, root)."""
    info = request.app[INFO]
    card = {"id": info["served_model_name"], "object": "model", "created": int(time.time()),
            "owned_by": "sglang", "root": info["model_path"], "parent": None,
            "max_model_len": None}  # fmt: skip
    return web.json_response({"object": "list", "data": [card]})
