"""What the emulated worker's HTTP routes share: app keys, the 4xx error shape, input checks.

Must not: serve routes itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from workers.emulated.cache import Admission
from workers.emulated.engine import Engine

ENGINE = web.AppKey("engine", Engine)
INFO = web.AppKey("info", dict)


class BadRequest(Exception):
    pass


def aborted(rid: str) -> web.Response:
    """The answer to a request aborted because its client left (nobody reads it; SGLang raises
    "Request is disconnected from the client side" there)."""
    return error(400, f"Request is disconnected from the client side. Abort request {rid}", rid)


def error(status: int, message: str, rid: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status, headers={"X-Request-Id": rid})


def token_ids(value: Any, what: str) -> list[int]:
    ok = isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in value
    )
    if not ok:
        raise BadRequest(f"{what}: expected a list of non-negative int32 token ids")
    return list(value)


def parse_max_new(value: Any, default: int) -> int:
    n = default if value is None else value
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise BadRequest(f"max tokens: expected an int >= 0, got {value!r}")
    return n


async def sse(request: web.Request, chunks: AsyncIterator[dict[str, Any]]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    async for chunk in chunks:
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


class Steps:
    """A request's decode steps; ``aclose`` marks the request done even if never iterated (a
    client that left before its first chunk), so the running count never leaks."""

    def __init__(self, gen: AsyncIterator[int], finish: Any) -> None:
        self._gen = gen
        self._finish = finish

    def __aiter__(self) -> AsyncIterator[int]:
        return self._gen

    async def aclose(self) -> None:
        aclose = getattr(self._gen, "aclose", None)
        if aclose is not None:
            await aclose()
        self._finish()


def client_gone(request: web.Request) -> bool:
    """The HTTP client of ``request`` closed its connection."""
    transport = request.transport
    return transport is None or transport.is_closing()


async def run(
    engine: Engine, tokens: list[int], max_new: int, request: web.Request | None = None
) -> tuple[Admission, Steps]:
    """Queue and prefill (``Engine.prefill``; with ``request``, a waiting request whose client
    left is aborted: ``ClientGone``), then the decode steps."""
    gone = None if request is None else (lambda: client_gone(request))
    adm = await engine.prefill(tokens, gone)
    finished = False

    def finish() -> None:
        nonlocal finished
        if not finished:
            finished = True
            engine.done(adm)

    async def steps() -> AsyncIterator[int]:
        try:
            async for t in engine.decode(tokens, max_new, adm):
                yield t
        finally:
            finish()

    return adm, Steps(steps(), finish)
