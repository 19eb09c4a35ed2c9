"""HTTP handlers of the edge: parse, decide, forward with streaming pass-through, feed back.

Owns the request lifecycle of ``POST /generate``, ``/v1/completions``, ``/v1/chat/completions``
(client side) and of a relayed request (``X-KVC-Forward-To`` from a peer edge: serve it on the
named local worker, no routing, and add this region's queue vector to the response), plus the
error middleware that turns every failure into the OpenAI error shape with the request id
echoed (4xx for client mistakes, 502/503 for upstream trouble, 500 only for edge bugs). Must not
score, hash or hold state of its own: ``EdgeService`` and ``Forwarder`` do.

Tenancy (``edge.tenants``): the API key is checked before the body is read (401 for a missing or
unknown key when tenants are configured); the body's ``model`` picks the model (404
``model_not_found``), which with the tenant gives the request's scope: the key namespace it is
looked up in and the workers it may go to. A relayed request is authenticated again by the
serving edge (the client's ``Authorization`` goes along to the peer edge, never to a worker).

Retry: when sending fails (connect error, timeout before response headers, or status 429/5xx)
the request goes once to the next-best explained candidate. Once the worker has started
answering, nothing is retried (the client may already have bytes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from edge import openai_shapes as shapes
from edge.feedback import (
    QUEUE_HEADER,
    RELAY_HEADER,
    WORKER_HEADER,
    SSEScanner,
    decode_queue_header,
    reused_from_json,
)
from edge.forwarder import ForwardError
from edge.http_client import HTTPError, Response

if TYPE_CHECKING:
    from edge.app import EdgeApp
    from edge.service import Explained

log = logging.getLogger(__name__)
_RID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_PARSERS = {
    "generate": shapes.parse_generate,
    "completions": shapes.parse_completions,
    "chat": shapes.parse_chat,
}


def request_id(request: web.Request) -> str:
    """The client's ``X-Request-Id`` if usable (1–128 of ``[A-Za-z0-9._:-]``), else a new one:
    a random per-process prefix plus a counter (unique without a syscall per request)."""
    rid = request.headers.get("X-Request-Id", "")
    if _RID.match(rid):
        return rid
    return request.app[EDGE].new_request_id()


def error_response(err: shapes.ApiError, rid: str) -> web.Response:
    resp = web.json_response(err.body(rid), status=err.status, headers={"X-Request-Id": rid})
    if err.status in (408, 413):  # the rest of the body is not read: do not reuse the connection
        resp.force_close()
    return resp


EDGE: web.AppKey[EdgeApp] = web.AppKey("edge")
"""The ``EdgeApp`` an application serves (set by ``edge.app.build_app``)."""


def _state(request: web.Request) -> EdgeApp:
    return request.app[EDGE]


@web.middleware
async def error_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    """Every error leaves as JSON in the OpenAI shape; the process never dies of a request."""
    try:
        resp: web.StreamResponse = await handler(request)
        return resp
    except shapes.ApiError as err:
        rid = request_id(request)
        _state(request).service.metrics.inc("errors_total", type=err.err_type)
        return error_response(err, rid)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        rid = request_id(request)
        _state(request).service.metrics.inc("errors_total", type=f"http-{exc.status}")
        return error_response(shapes.ApiError(exc.status, exc.reason), rid)
    except ConnectionError as exc:  # the client went away (reset, broken pipe): not our error
        log.debug("client went away on %s: %r", request.path, exc)
        _state(request).service.metrics.inc("client_disconnect_total")
        gone = web.Response(status=499, reason="Client Closed Request")
        gone.force_close()
        return gone
    except Exception:  # an edge bug: say so, keep serving
        log.exception("unhandled error on %s", request.path)
        rid = request_id(request)
        _state(request).service.metrics.inc("errors_total", type="internal")
        return error_response(shapes.ApiError(500, "internal edge error", "server_error"), rid)


async def read_body(request: web.Request) -> bytes:
    """The whole body, at most ``max_body_bytes`` (413) within ``body_timeout_ms`` (408)."""
    cfg = _state(request).config
    limit = cfg.max_body_bytes
    if request.content_length is not None and request.content_length > limit:
        raise shapes.ApiError(413, f"body: expected at most {limit} bytes, got "
                                   f"{request.content_length}")  # fmt: skip
    try:
        async with asyncio.timeout(cfg.body_timeout_ms / 1000.0):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise shapes.ApiError(413, f"body: expected at most {limit} bytes") from None
    except TimeoutError:
        got = request.content.total_bytes
        raise shapes.ApiError(
            408, f"body: expected all of it within {cfg.body_timeout_ms:g} ms; got {got} bytes"
        ) from None


def make_completion_handler(kind: str) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        st = _state(request)
        rid = request_id(request)
        st.in_flight += 1
        try:
            return await _serve(request, st, kind, rid)
        except shapes.ApiError as err:
            st.service.metrics.inc("requests_total", endpoint=kind, status=err.status)
            st.service.metrics.inc("errors_total", type=err.err_type)
            return error_response(err, rid)
        finally:
            st.in_flight -= 1

    return handle


async def _serve(request: web.Request, st: EdgeApp, kind: str, rid: str) -> web.StreamResponse:
    auth = request.headers.get("Authorization")
    tenant = st.tenancy.authenticate(auth)
    raw = await read_body(request)
    body = shapes.parse_json(raw)
    if kind == "generate" and isinstance(body.get("rid"), str) and _RID.match(body["rid"]):
        rid = body["rid"]
    model = st.tenancy.model(body.get("model"))
    parsed = _PARSERS[kind](body, st.tokenizer, st.limits_for(model.name))
    scope = st.tenancy.scope(model, tenant)
    relay_headers = {"Authorization": auth} if auth is not None and tenant is not None else None
    relay = request.headers.get(RELAY_HEADER)
    if relay is not None:
        worker = st.relay_target(relay)
        if not scope.allows(worker):
            raise shapes.ApiError(403, f"X-KVC-Forward-To: worker {worker} does not serve this "
                                       "model for this tenant", code="forbidden")  # fmt: skip
        return await _proxy(request, st, kind, rid, raw, parsed, [worker], None)
    ex = st.service.decide(rid, parsed.tokens, scope)
    reachable = st.forwarder.reachable
    cands = st.service.candidates(ex, lambda w: scope.allows(w) and reachable(w))[:2]
    if not cands:
        raise shapes.ApiError(503, "no reachable worker can serve this request",
                              "service_unavailable", code="no_candidates")  # fmt: skip
    return await _proxy(request, st, kind, rid, raw, parsed, cands, ex, relay_headers)


async def _proxy(
    request: web.Request,
    st: EdgeApp,
    kind: str,
    rid: str,
    raw: bytes,
    parsed: shapes.Parsed,
    cands: list[int],
    ex: Explained | None,
    relay_headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    metrics = st.service.metrics
    fwd = parsed.forward_body
    payload = raw if fwd is None else json.dumps(fwd, separators=(",", ":")).encode()
    headers = {"Content-Type": "application/json", "X-Request-Id": rid}
    resp: Response | None = None
    worker = -1
    for i, w in enumerate(cands):
        if i:
            metrics.inc("retries_total")
        if ex is not None:
            st.service.dispatch(ex, w)
        try:
            resp = await _unless_client_leaves(
                request,
                st.forwarder.send(w, parsed.worker_path, payload, headers,
                                  relay_headers=relay_headers),
            )  # fmt: skip
            worker = w
            break
        except ClientLeft:
            if ex is not None:
                st.service.undispatch(w)
            metrics.inc("client_disconnect_total")
            log.debug("client left before worker %d answered: upstream request closed", w)
            return web.Response(status=499)  # nobody reads it (nginx's "client closed request")
        except ForwardError as err:
            if ex is not None:
                st.service.undispatch(w)
            metrics.inc("forward_failures_total", reason=err.reason)
            if ex is not None:
                ex.attempts.append({"worker": w, "error": str(err)[:300]})
    if resp is None:
        raise shapes.ApiError(502, f"no worker answered ({len(cands)} tried)", "upstream_error",
                              code="upstream_unavailable")  # fmt: skip
    if ex is not None:
        st.service.on_forward(rid, ex, worker, parsed.tokens)
    out_headers = {"X-Request-Id": rid, WORKER_HEADER: str(worker)}
    if ex is None:  # relayed: piggyback this region's live queue vector
        out_headers[QUEUE_HEADER] = st.local_queue_header()
    try:
        qv = None
        raw_qv = resp.headers.get(QUEUE_HEADER)
        if raw_qv is not None and ex is not None:
            dep = st.service.deployment
            qv = decode_queue_header(raw_qv, dep.n_regions, dep.n_workers)
            metrics.inc("piggybacks_total", result="ok" if qv is not None else "malformed")
        if parsed.stream and resp.status == 200:
            out, reused = await _stream(request, resp, parsed, out_headers)
        else:
            out, reused = await _whole(resp, parsed.kind, out_headers)
    except (HTTPError, ConnectionError, asyncio.IncompleteReadError) as exc:
        raise shapes.ApiError(502, f"worker {worker} failed mid-response: {exc!r}"[:300],
                              "upstream_error") from None  # fmt: skip
    finally:
        resp.release()
        if ex is not None:
            st.service.on_done(ex)
    metrics.inc("requests_total", endpoint=kind, status=out.status)
    if ex is not None:
        st.service.on_response(ex, worker, reused, qv)
    return out


CLIENT_POLL_S = 0.5
"""How often the requests waiting for their worker's response head are checked for a client that
left (SGLang itself checks its clients every 4 s)."""


class ClientLeft(Exception):
    """The client closed its connection before the worker answered."""


def _client_gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


class _Waiting:
    """The handlers awaiting a worker's response head, and one watcher per event loop that
    cancels those whose client left. One set insert and delete per request, where a watch loop
    per request (a task and a timed wait) cost 16–25 µs of CPU, 4–6% of a forward."""

    def __init__(self) -> None:
        self.tasks: dict[asyncio.Task[Any], web.Request] = {}
        self.left: set[asyncio.Task[Any]] = set()
        self.watcher: asyncio.Task[None] | None = None

    async def watch(self) -> None:
        while self.tasks:
            await asyncio.sleep(CLIENT_POLL_S)
            for task, request in list(self.tasks.items()):
                if task not in self.left and _client_gone(request):
                    self.left.add(task)
                    task.cancel()
        self.watcher = None

    def add(self, task: asyncio.Task[Any], request: web.Request) -> None:
        self.tasks[task] = request
        if self.watcher is None or self.watcher.done():
            self.watcher = asyncio.get_running_loop().create_task(self.watch())


_WAITING: dict[asyncio.AbstractEventLoop, _Waiting] = {}


async def _unless_client_leaves(request: web.Request, send: Awaitable[Response]) -> Response:
    """Await ``send`` (the forward, until the worker's response head); if the client leaves
    meanwhile, the watcher cancels this handler there, which closes the upstream connection
    (``Pool.post``), so the worker (or the peer edge relaying to it) sees the disconnect and
    aborts the queued request, as a proxy should (nginx's ``proxy_ignore_client_abort off``).
    Raises ``ClientLeft``."""
    me = asyncio.current_task()
    if me is None:  # not in a task: nothing can cancel it
        return await send
    loop = asyncio.get_running_loop()
    waiting = _WAITING.get(loop)
    if waiting is None:
        waiting = _WAITING[loop] = _Waiting()
        for old in [lp for lp in _WAITING if lp.is_closed()]:
            del _WAITING[old]
    waiting.add(me, request)
    try:
        return await send
    except asyncio.CancelledError:
        if me not in waiting.left:
            raise
        me.uncancel()
        raise ClientLeft() from None
    finally:
        waiting.tasks.pop(me, None)
        waiting.left.discard(me)


async def _whole(
    resp: Response, kind: str, headers: dict[str, str]
) -> tuple[web.StreamResponse, int | None]:
    data = await resp.read()
    reused = reused_from_json(data) if resp.status == 200 else None
    if kind == "chat" and resp.status == 200:
        try:
            data = json.dumps(shapes.chat_body(json.loads(data))).encode()
        except (ValueError, AttributeError):
            raise shapes.ApiError(502, "worker answered with a malformed completion",
                                  "upstream_error") from None  # fmt: skip
    ctype = resp.headers.get("Content-Type", "application/json")
    headers["Content-Type"] = ctype
    return web.Response(body=data, status=resp.status, headers=headers), reused


async def _stream(
    request: web.Request, resp: Response, parsed: shapes.Parsed, headers: dict[str, str]
) -> tuple[web.StreamResponse, int | None]:
    headers["Content-Type"] = "text/event-stream"
    headers["Cache-Control"] = "no-cache"
    out = web.StreamResponse(status=200, headers=headers)
    await out.prepare(request)
    scanner = SSEScanner()
    reused: int | None = None
    chat = parsed.kind == "chat"
    # Pass-through (bytes leave as they arrive) unless events must be reshaped or dropped.
    through = not chat and not parsed.strip_usage
    started: set[int] = set()
    try:
        async for chunk in resp.iter_chunks():
            if through:
                await out.write(chunk)
                if reused is not None:
                    continue
            for event in scanner.feed(chunk):
                if event == b"[DONE]":
                    if not through:
                        await out.write(b"data: [DONE]\n\n")
                    continue
                if reused is None and b"cached_tokens" in event:
                    reused = reused_from_json(event)
                if not through:
                    data = _reshaped(event, chat, parsed.strip_usage, started)
                    if data is not None:
                        await out.write(data)
        await out.write_eof()
    except (ConnectionError, HTTPError, asyncio.IncompleteReadError) as exc:  # a side went away
        log.debug("stream ended early: %r", exc)
        if request.transport is None or request.transport.is_closing():  # it was the client
            _state(request).service.metrics.inc("client_disconnect_total")
    return out, reused


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


__all__ = ["EDGE", "error_middleware", "make_completion_handler", "read_body", "request_id"]
