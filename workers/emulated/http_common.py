"""What the emulated worker's HTTP routes share: app keys, SGLang's error shapes, input checks,
the run of one request (queue, prefill, decode) and its abort when the client leaves.

Error bodies, as SGLang 0.5.23 builds them (``sglang/srt/entrypoints``):
- native routes (``/generate``): ``{"error": {"message": ...}}``, 400 (``http_server.py``,
  ``_create_error_response``, for the ``ValueError`` the tokenizer manager raises);
- OpenAI routes: ``{"object": "error", "message", "type": "BadRequest", "param": null, "code":
  400}`` (``openai/serving_base.py``, ``create_error_response``);
- a body that does not validate (bad JSON, wrong field types): the same ``ErrorResponse`` with
  ``type: "Bad Request"`` (``http_server.py``, the ``RequestValidationError`` handler: 400, not
  FastAPI's 422).
The emulated worker's own routes (``/kv/*``) keep ``error``. Must not: serve routes itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from aiohttp import web

from workers.emulated.cache import Admission
from workers.emulated.engine import ABORT_POLL_MS, ClientGone, Engine
from workers.emulated.metrics import FORCE_STREAM_INTERVAL, WorkerMetrics

if TYPE_CHECKING:
    from workers.emulated.disagg import Bootstrap, Disagg

ENGINE = web.AppKey("engine", Engine)
INFO = web.AppKey("info", dict)
METRICS = web.AppKey("metrics", WorkerMetrics)


class BadRequest(Exception):
    """A request SGLang refuses with its ``ValueError`` (400, the route's error shape)."""


def aborted(exc: ClientGone, rid: str, openai: bool) -> web.Response:
    """The answer to a request aborted because its client left (nobody reads it): SGLang's
    ``ValueError`` ("Request is disconnected from the client side (type N). Abort request ...")
    as each route shapes it."""
    return (openai_error if openai else native_error)(str(exc), rid)


def error(status: int, message: str, rid: str) -> web.Response:
    """The emulated worker's own routes (``/kv/*``, not SGLang's)."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": status}}
    return web.json_response(body, status=status, headers={"X-Request-Id": rid})


def native_error(message: str, rid: str, status: int = 400) -> web.Response:
    """SGLang's ``_create_error_response`` (``/generate``)."""
    return web.json_response({"error": {"message": message}}, status=status,
                             headers={"X-Request-Id": rid})  # fmt: skip


def openai_error(
    message: str, rid: str, status: int = 400, err_type: str = "BadRequest"
) -> web.Response:
    """SGLang's ``ErrorResponse`` (OpenAI routes; ``err_type="Bad Request"`` for a body that
    does not validate)."""
    body = {"object": "error", "message": message, "type": err_type, "param": None,
            "code": status}  # fmt: skip
    return web.json_response(body, status=status, headers={"X-Request-Id": rid})


class Invalid(BadRequest):
    """A body that does not validate (SGLang: pydantic → ``RequestValidationError`` → 400)."""


def cache_salt(body: dict[str, Any]) -> str | None:
    """The request's cache namespace: SGLang 0.5.23's ``cache_salt`` (``GenerateReqInput`` and
    the OpenAI requests; an empty string is none, as ``_normalize_cache_salt`` has it). One prompt
    per salt here, so a string or nothing (SGLang also takes a list per batch item)."""
    value = body.get("cache_salt")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Invalid(f"cache_salt: expected a string, got {type(value).__name__}")
    return value


def token_ids(value: Any, what: str) -> list[int]:
    ok = isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < 2**31 for t in value
    )
    if not ok:
        raise Invalid(f"{what}: expected a list of non-negative int32 token ids")
    return list(value)


async def sse(request: web.Request, chunks: AsyncIterator[dict[str, Any]]) -> web.StreamResponse:
    """Server-sent events of ``chunks``, then ``[DONE]``. A client that left ends the stream
    quietly (``ClientGone`` from the steps, or the transport's reset on a write): nobody reads
    it, and the request is aborted by the caller closing its steps."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    try:
        async for chunk in chunks:
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    except (ClientGone, ConnectionResetError):
        pass
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    return resp


class Steps:
    """A request's decode steps; ``aclose`` marks the request done even if never iterated (a
    client that left before its first chunk), so the running count never leaks."""

    def __init__(self, gen: AsyncIterator[int], finish: Any, stop: Any = None) -> None:
        self._gen = gen
        self._finish = finish
        self._stop = stop

    def stop(self) -> None:
        """The output ended at a stop string: the request finished (not aborted) even though
        its steps are closed before their end."""
        if self._stop is not None:
            self._stop()

    def __aiter__(self) -> AsyncIterator[int]:
        return self._gen

    async def aclose(self) -> None:
        aclose = getattr(self._gen, "aclose", None)
        try:
            if aclose is not None:
                await aclose()
        finally:
            self._finish()


def client_gone(request: web.Request) -> bool:
    """The HTTP client of ``request`` closed its connection."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _gone_message(rid: str, kind: int) -> str:
    return f"Request is disconnected from the client side (type {kind}). Abort request {rid=}"


async def run(
    engine: Engine,
    tokens: list[int],
    max_new: int,
    request: web.Request | None = None,
    rid: str = "",
    pd: tuple[Disagg, Bootstrap | None] | None = None,
    salt: str | None = None,
    stream: bool = False,
) -> tuple[Admission, Steps]:
    """Queue and prefill (``Engine.prefill``), then the decode steps.

    With ``request``, a request whose HTTP client left is aborted (``ClientGone``), waiting or
    running: SGLang's tokenizer manager (``_stream_one_response``) checks
    ``request.is_disconnected()`` whenever no output came for ``SGLANG_REQUEST_STATE_WAIT_TIMEOUT``
    (4 s), aborts the request and raises "(type 1)"; a streamed response's client that left is
    seen at the next write (Starlette cancels the stream and its background task aborts the
    request). Here: every ``ABORT_POLL_MS`` of model time, queued (``Engine.prefill``) and
    decoding alike; a running request used to decode to its end for nobody, minutes on a
    hot-spotted worker, and kept the worker from exiting.

    ``pd``: the worker's PD role and the request's bootstrap fields (``disagg``): a prefill
    worker marks the room's KV ready, a decode worker receives the KV instead of prefilling.

    With ``request``, the request is recorded in the app's ``METRICS`` (``metrics``; ``stream``
    is its ``is_streaming`` label): the first output SGLang would send, then finished or
    aborted."""
    gone = None if request is None else (lambda: client_gone(request))
    stats = None if request is None else request.app.get(METRICS)
    started = time.perf_counter()
    try:
        if pd is None:
            adm = await engine.prefill(tokens, gone, salt)
        else:
            adm = await pd[0].admit(engine, tokens, pd[1], gone, salt)
    except ClientGone:
        if stats is not None:
            stats.aborted()
        raise ClientGone(_gone_message(rid, 1)) from None
    finished = completed = False
    n_out = 0
    poll_s = max(engine.costs.sleep_s(ABORT_POLL_MS), 0.05)

    def first_output(n: int, done: bool) -> bool:
        """This output is the first SGLang's tokenizer manager gets (``output_streamer``)."""
        first = (n == 1) if stream else (n == FORCE_STREAM_INTERVAL)
        return first or (done and (n == 0 or (n < FORCE_STREAM_INTERVAL and not stream)))

    def finish() -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        engine.done(adm)
        if stats is None:
            return
        if not completed:
            stats.aborted()
            return
        now = time.perf_counter() - started
        if first_output(n_out, True):
            stats.first_output(now, stream)
        stats.finished(adm.prompt_tokens, n_out, adm.device_hit_tokens, adm.host_hit_tokens,
                       now, stream)  # fmt: skip

    async def steps() -> AsyncIterator[int]:
        nonlocal n_out, completed
        checked = time.monotonic()
        try:
            async for t in engine.decode(tokens, max_new, adm):
                if gone is not None and time.monotonic() - checked >= poll_s:
                    checked = time.monotonic()
                    if gone():
                        raise ClientGone(_gone_message(rid, 1))
                n_out += 1
                if stats is not None and n_out < max_new and first_output(n_out, False):
                    stats.first_output(time.perf_counter() - started, stream)
                yield t
            completed = True
        finally:
            finish()

    def stopped() -> None:
        nonlocal completed
        completed = True

    return adm, Steps(steps(), finish, stopped)
