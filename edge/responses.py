"""What the client gets back: the worker's stream relayed, or assembled into one whole body.

Owns the client side of a forwarded request once the worker answered 200. The edge always asks
the worker for a stream (``edge.openai_shapes``: ``stream: true``, and ``include_usage`` on the
OpenAI routes), whatever the client asked, so the first token is seen when the worker sends it and
the booking retires and the holder is confirmed then, for every request (issue 34 item 2; before,
a non-streamed answer reached the edge only at its last byte). For a client that asked for a
stream, the events go out as they come (``relay``); for one that did not, ``assemble`` builds the
body the worker would have returned unstreamed, as Dynamo's frontend does:

- ``/generate`` (SGLang): its default stream (not ``--incremental-streaming-output``) repeats the
  whole ``text``/``output_ids`` so far in every chunk, and its last chunk of a choice is the
  object a non-streamed request returns (``tokenizer_manager``'s output processor builds both
  from the same state); the body is that object, or the list of them by ``index`` for several.
- ``/v1/completions`` (and chat, which the edge sends there): ``id``, ``object``
  (``text_completion``), ``created``, ``model`` of the first chunk, one choice per ``index`` with
  its texts joined, its last ``finish_reason`` (and any other member the chunks carry, e.g.
  ``matched_stop``), its ``logprobs`` lists concatenated, and the ``usage`` of the last chunk;
  the chat shape is then made by ``openai_shapes.chat_body`` as before.

Two guards on what reaches the client and the metrics (issue 35 item 10): every
``cached_tokens`` (and ``cached_tokens_details`` count) above the prompt length is clamped to it
(``clamp_cached``: a worker that lies cannot show a client, or the reuse metrics, more reuse than
the prompt has), and a write to a client that does not read for ``stream_write_timeout_ms`` ends
the response with one WARNING line (the client's connection is closed, the upstream released).
Must not route or touch the decider: the handler passes ``first`` (called once, at the first
chunk) and feeds the decider with what this returns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web

from edge import openai_shapes as shapes
from edge.feedback import SSEScanner, reused_from_json, reused_tokens
from edge.http_client import HTTPError, UpstreamResponse

log = logging.getLogger(__name__)

_CACHED = re.compile(rb'("cached_tokens"\s*:\s*)(\d+)')
_DETAILS = re.compile(rb'"cached_tokens_details"\s*:\s*\{[^{}]*\}')
_COUNT = re.compile(rb'("(?:device|host)"\s*:\s*)(\d+)')


_JOINED = ("index", "text", "logprobs", "delta")
"""Choice members the assembler builds itself; any other keeps its last non-null value."""


class WriteTimeout(Exception):
    """The client read nothing for ``stream_write_timeout_ms``."""


def clamp_cached(data: bytes, limit: int) -> bytes:
    """``data`` with every ``cached_tokens`` (and ``cached_tokens_details`` ``device``/``host``)
    above ``limit`` replaced by ``limit``. A member name is matched only where it is one: inside a
    JSON string a quote is escaped, so ``"cached_tokens"`` followed by ``:`` is always a key."""
    if b"cached_tokens" not in data:
        return data

    def cap(m: re.Match[bytes]) -> bytes:
        return m.group(0) if int(m.group(2)) <= limit else m.group(1) + str(limit).encode()

    out = _CACHED.sub(cap, data)
    return _DETAILS.sub(lambda m: _COUNT.sub(cap, m.group(0)), out)


def clamped(reused: int | None, limit: int) -> int | None:
    return None if reused is None else min(reused, limit)


async def _write(out: web.StreamResponse, data: bytes, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            await out.write(data)
    except TimeoutError:
        raise WriteTimeout from None


def _timed_out(request: web.Request, rid: str, worker: int, timeout_s: float) -> None:
    log.warning(
        "request %s: its client read nothing of the stream from worker %d for %g s "
        "(stream_write_timeout_ms): response ended, client connection closed",
        rid, worker, timeout_s,
    )  # fmt: skip
    if request.transport is not None:
        request.transport.close()


async def relay(
    request: web.Request,
    resp: UpstreamResponse,
    parsed: shapes.Parsed,
    headers: dict[str, str],
    first: Callable[[int | None], None],
    timeout_s: float,
    worker: int,
    rid: str,
) -> tuple[web.StreamResponse, int | None, str]:
    """Stream the worker's events to the client; ``first`` is called once, at the first chunk,
    with the reuse count if that chunk carried it (SGLang's ``/generate`` does). Events leave
    whole (a count split across network chunks is clamped too). Returns (response, reuse, how it
    ended: ``done``, ``stuck`` (the client read nothing for ``timeout_s``), ``client_left``,
    ``worker_broke``); a stream already begun cannot become an error response."""
    headers["Content-Type"] = "text/event-stream"
    headers["Cache-Control"] = "no-cache"
    out = web.StreamResponse(status=200, headers=headers)
    await out.prepare(request)
    scanner = SSEScanner()
    limit = len(parsed.tokens)
    reused: int | None = None
    chat = parsed.kind == "chat"
    # Pass-through (whole events leave as they arrive) unless events must be reshaped or dropped.
    through = not chat and not parsed.strip_usage
    started: set[int] = set()
    answered = False
    pending = b""
    try:
        async for chunk in resp.iter_chunks():
            if through:
                pending += chunk
                cut = pending.rfind(b"\n\n") + 2
                if cut >= 2:
                    ready, pending = pending[:cut], pending[cut:]
                    await _write(out, clamp_cached(ready, limit), timeout_s)
            events = scanner.feed(chunk) if not through or reused is None else []
            for event in events:
                if event == b"[DONE]":
                    if not through:
                        await _write(out, b"data: [DONE]\n\n", timeout_s)
                    continue
                if reused is None and b"cached_tokens" in event:
                    reused = clamped(reused_from_json(event), limit)
                if not through:
                    data = _reshaped(event, chat, parsed.strip_usage, started)
                    if data is not None:
                        await _write(out, clamp_cached(data, limit), timeout_s)
            if not answered:
                answered = True
                first(reused)
        if pending:
            await _write(out, clamp_cached(pending, limit), timeout_s)
        await out.write_eof()
    except WriteTimeout:
        _timed_out(request, rid, worker, timeout_s)
        return out, reused, "stuck"
    except (ConnectionError, HTTPError, asyncio.IncompleteReadError) as exc:  # a side went away
        log.debug("stream ended early: %r", exc)
        if request.transport is None or request.transport.is_closing():  # it was the client
            return out, reused, "client_left"
        return out, reused, "worker_broke"
    return out, reused, "done"


def _reshaped(event: bytes, chat: bool, strip_usage: bool, started: set[int]) -> bytes | None:
    """One worker event as the client gets it; None: the usage chunk it did not ask for."""
    try:
        obj = json.loads(event)
    except ValueError:
        return b"data: " + event + b"\n\n"
    if not isinstance(obj, dict):
        return b"data: " + event + b"\n\n"
    if strip_usage and "usage" in obj and not obj.get("choices"):
        return None
    if chat:
        obj = shapes.chat_chunk(obj, started)
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Assembler:
    """The whole body of one response, built from the worker's stream events (module doc)."""

    def __init__(self, kind: str) -> None:
        self.generate = kind == "generate"
        self.last: dict[int, dict[str, Any]] = {}
        """``/generate``: the newest object per ``index``."""
        self.head: dict[str, Any] = {}
        self.texts: dict[int, list[str]] = {}
        self.extra: dict[int, dict[str, Any]] = {}
        self.logprobs: dict[int, dict[str, Any]] = {}
        self.usage: Any = None

    def feed(self, event: bytes) -> None:
        """One ``data:`` payload; raises ``ValueError`` if it is not a JSON object."""
        obj = json.loads(event)
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        if self.generate:
            index = obj.get("index", 0)
            self.last[index if type(index) is int else 0] = obj
            return
        if obj.get("usage") is not None:
            self.usage = obj["usage"]
        for k, v in obj.items():
            if k not in ("choices", "usage"):
                self.head.setdefault(k, v)
        for c in obj.get("choices") or []:
            if isinstance(c, dict):
                self._choice(c)

    def _choice(self, c: dict[str, Any]) -> None:
        index = c.get("index", 0)
        i = index if type(index) is int else 0
        text = c.get("text")
        self.texts.setdefault(i, []).append(text if isinstance(text, str) else "")
        extra = self.extra.setdefault(i, {"finish_reason": None})
        for k, v in c.items():
            if k not in _JOINED and (v is not None or k not in extra):
                extra[k] = v
        lp = c.get("logprobs")
        if isinstance(lp, dict):
            merged = self.logprobs.setdefault(i, {})
            for k, v in lp.items():
                if isinstance(v, list):
                    merged.setdefault(k, []).extend(v)
                else:
                    merged[k] = v

    def body(self) -> Any:
        """The whole response (raises ``ValueError`` if the stream held no answer)."""
        if self.generate:
            if not self.last:
                raise ValueError("the stream held no /generate object")
            objs = [self.last[i] for i in sorted(self.last)]
            return objs[0] if len(objs) == 1 else objs
        if not self.texts:
            raise ValueError("the stream held no choice")
        choices = [
            {"index": i, "text": "".join(self.texts[i]), "logprobs": self.logprobs.get(i),
             **self.extra[i]}
            for i in sorted(self.texts)
        ]  # fmt: skip
        head = {k: v for k, v in self.head.items() if k != "object"}
        return {"id": head.pop("id", None), "object": "text_completion",
                "created": head.pop("created", None), "model": head.pop("model", None),
                **head, "choices": choices, "usage": self.usage}  # fmt: skip


async def assemble(
    request: web.Request,
    resp: UpstreamResponse,
    parsed: shapes.Parsed,
    headers: dict[str, str],
    first: Callable[[int | None], None],
    worker: int,
) -> tuple[web.Response, int | None]:
    """Read the worker's whole stream (``first`` at its first chunk) and answer with the body it
    would have returned unstreamed; a stream that holds no answer is a 502."""
    scanner = SSEScanner()
    limit = len(parsed.tokens)
    whole = Assembler(parsed.kind)
    reused: int | None = None
    answered = False
    try:
        async for chunk in resp.iter_chunks():
            for event in scanner.feed(chunk):
                if event == b"[DONE]":
                    continue
                whole.feed(event)
                if reused is None and b"cached_tokens" in event:
                    reused = clamped(reused_from_json(event), limit)
            if not answered:
                answered = True
                first(reused)
        body = whole.body()
    except (ValueError, RecursionError) as exc:
        raise shapes.ApiError(502, f"worker {worker} streamed a malformed answer: {exc}"[:300],
                              "upstream_error") from None  # fmt: skip
    if parsed.kind == "chat":
        body = shapes.chat_body(body)
    if reused is None:
        reused = clamped(reused_tokens(body if isinstance(body, dict) else None), limit)
    data = clamp_cached(json.dumps(body).encode(), limit)
    headers["Content-Type"] = "application/json"
    return web.Response(body=data, status=200, headers=headers), reused


async def whole(
    resp: UpstreamResponse, parsed: shapes.Parsed, headers: dict[str, str]
) -> tuple[web.Response, int | None]:
    """A response the worker did not stream (an error, or a worker that ignored ``stream``),
    passed on as it came (a chat completion reshaped, counts clamped)."""
    data = await resp.read()
    limit = len(parsed.tokens)
    reused = clamped(reused_from_json(data), limit) if resp.status == 200 else None
    if parsed.kind == "chat" and resp.status == 200:
        try:
            data = json.dumps(shapes.chat_body(json.loads(data))).encode()
        except (ValueError, AttributeError):
            raise shapes.ApiError(502, "worker answered with a malformed completion",
                                  "upstream_error") from None  # fmt: skip
    headers["Content-Type"] = resp.headers.get("Content-Type", "application/json")
    body = clamp_cached(data, limit) if resp.status == 200 else data
    return web.Response(body=body, status=resp.status, headers=headers), reused
