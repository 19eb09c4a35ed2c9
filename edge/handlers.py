"""HTTP handlers of the edge: parse, decide, forward (the worker always streams), feed back.

Owns the request lifecycle of ``POST /generate``, ``/v1/completions``, ``/v1/chat/completions``
(client side) and of a relayed request (``X-KVC-Forward-To`` from a peer edge, signed with the
deployment's relay key, ``edge.relay_auth``: book or refuse with its shortlist, else serve it on
the named local worker, and add this region's queue vector to the response; a client's unsigned
``X-KVC-*`` headers are dropped and its request routed), the answer (``edge.responses``: the
stream relayed, or the whole body assembled from it for a client that asked for one), plus the
error middleware that turns every failure into the OpenAI error shape with the request id
echoed (4xx for client mistakes, 502/503 for upstream trouble, 500 only for edge bugs). Must not
score, hash or hold state of its own: ``EdgeService`` and ``Forwarder`` do.

Tenancy (``edge.tenants``): the API key is checked before the body is read (401 for a missing or
unknown key when tenants are configured); the body's ``model`` picks the model (404
``model_not_found``), which with the tenant gives the request's scope: the key namespace it is
looked up in and the workers it may go to. A relayed request is authenticated again by the
serving edge (the client's ``Authorization`` goes along to the peer edge, never to a worker).

Request ids (``edge.request_ids``): every completion gets an edge-minted, unguessable id; it keys
the decision and is the id the worker sees. A client's ``X-Request-Id`` (or ``/generate``'s body
``rid``) is kept beside it, scoped to the tenant, and echoed back; the edge id rides in
``X-KVC-Request-Id``. The worker's body carries the tenant's sharing group as ``cache_salt``
(``edge.isolation``). Large bodies are parsed and tokenized off the loop (``edge.off_loop``).

Retry: when sending fails (connect error, timeout before response headers, or status 429/5xx)
the request goes once to the next-best explained candidate. Once the worker has started
answering, nothing is retried (the client may already have bytes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from edge import isolation, request_ids, responses
from edge import openai_shapes as shapes
from edge.client_watch import ClientLeft, unless_client_leaves
from edge.feedback import (
    ORIGIN_HEADER,
    QUEUE_HEADER,
    RELAY_HEADER,
    WORKER_HEADER,
    decode_queue_header,
    encode_queue_header,
)
from edge.forwarder import ForwardError
from edge.http_client import HTTPError, UpstreamResponse
from edge.relay import (
    REFUSED_HEADER,
    REFUSED_STATUS,
    SHORTLIST_HEADER,
    decode_shortlist,
    encode_shortlist,
)
from edge.relay_auth import relay_headers as kvc_headers
from kvcompass.decider import QueueVector

if TYPE_CHECKING:
    from edge.app import EdgeApp
    from edge.service import EdgeService, Explained
    from edge.tenants import ModelSpec, Scope

log = logging.getLogger(__name__)
_PARSERS = {
    "generate": shapes.parse_generate,
    "completions": shapes.parse_completions,
    "chat": shapes.parse_chat,
}


def request_id(request: web.Request) -> str:
    """The id echoed to the client: its ``X-Request-Id`` if usable, else a new edge id
    (``edge.request_ids``)."""
    return request_ids.client_id(request.headers.get("X-Request-Id")) or request_ids.mint()


def error_response(err: shapes.ApiError, rid: str) -> web.Response:
    resp = web.json_response(err.body(rid), status=err.status, headers={"X-Request-Id": rid})
    if err.status in (408, 413):  # the rest of the body is not read: do not reuse the connection
        resp.force_close()
    return resp


EDGE: web.AppKey[EdgeApp] = web.AppKey("edge")
"""The ``EdgeApp`` an application serves (set by ``edge.app.build_app``)."""
_IDS: web.RequestKey[request_ids.RequestIds] = web.RequestKey(
    "kvc_request_ids", request_ids.RequestIds
)
"""Where a completion request keeps its ``RequestIds`` (the edge's and the client's)."""


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
        ids = request_ids.RequestIds(
            request_ids.mint(), request_ids.client_id(request.headers.get("X-Request-Id"))
        )
        st.open_requests += 1
        try:
            return await _serve(request, st, kind, ids)
        except shapes.ApiError as err:
            st.service.metrics.inc("requests_total", endpoint=kind, status=err.status)
            st.service.metrics.inc("errors_total", type=err.err_type)
            resp = error_response(err, ids.echo)
            resp.headers[request_ids.EDGE_ID_HEADER] = ids.edge
            return resp
        finally:
            st.open_requests -= 1

    return handle


def _parse(st: EdgeApp, kind: str, raw: bytes) -> tuple[dict[str, Any], ModelSpec, shapes.Parsed]:
    """Decode, pick the model, validate and tokenize (off the loop for a large body)."""
    body = shapes.parse_json(raw)
    model = st.tenancy.model(body.get("model"))
    return body, model, _PARSERS[kind](body, st.tokenizer, st.limits_for(model.name))


async def _serve(
    request: web.Request, st: EdgeApp, kind: str, ids: request_ids.RequestIds
) -> web.StreamResponse:
    auth = request.headers.get("Authorization")
    tenant = st.tenancy.authenticate(auth)
    raw = await read_body(request)
    body, model, parsed = await st.off_loop.run(len(raw), lambda: _parse(st, kind, raw))
    if kind == "generate" and ids.client is None:  # SGLang's own id field: the client's id
        ids.client = request_ids.client_id(body.get("rid"))
    if ids.client is not None:
        st.client_ids.add(tenant.name if tenant is not None else None, ids.client, ids.edge)
    scope = st.tenancy.scope(model, tenant)
    parsed = isolation.worker_body(parsed, body, scope.cache_salt, ids)
    rid = ids.edge
    request[_IDS] = ids
    relay_headers = {"Authorization": auth} if auth is not None and tenant is not None else None
    reachable = st.forwarder.reachable

    def usable(w: int) -> bool:
        return scope.allows(w) and reachable(w)

    kvc = _trusted_relay_headers(request, st, raw)
    relay = kvc.get(RELAY_HEADER)
    if relay is not None:
        return await _serve_relay(request, st, kind, rid, raw, parsed, scope, kvc, usable)
    ex = st.service.decide(rid, parsed.tokens, scope)
    cands = st.service.candidates(ex, usable)[:2]
    if not cands:
        raise shapes.ApiError(503, "no reachable worker can serve this request",
                              "service_unavailable", code="no_candidates")  # fmt: skip
    return await _proxy(request, st, kind, rid, raw, parsed, cands, ex, usable, relay_headers)


def _trusted_relay_headers(request: web.Request, st: EdgeApp, raw: bytes) -> dict[str, str]:
    """The request's ``X-KVC-*`` headers (canonical names) if a peer edge signed them
    (``edge.relay_auth``); else none: a client's are dropped, counted by reason, and the request
    is routed like any other (issue 35 item 5)."""
    kvc = kvc_headers(request.headers)
    if not kvc:
        return {}
    auth = st.forwarder.relay_auth
    why = auth.verify(request.path, raw, request.headers) if auth is not None else "no_relay_key"
    if why is not None:
        st.service.metrics.inc("relay_headers_stripped_total", reason=why)
        log.debug("request %s: X-KVC-* headers dropped (%s): %s", request[_IDS].edge, why,
                  sorted(kvc)[:8])  # fmt: skip
        return {}
    names = {n.lower(): n for n in (RELAY_HEADER, ORIGIN_HEADER, SHORTLIST_HEADER)}
    return {names.get(k.lower(), k): v for k, v in kvc.items()}


async def _serve_relay(
    request: web.Request,
    st: EdgeApp,
    kind: str,
    rid: str,
    raw: bytes,
    parsed: shapes.Parsed,
    scope: Scope,
    kvc: dict[str, str],
    usable: Callable[[int], bool],
) -> web.StreamResponse:
    """A peer edge relayed a request here (``kvc``: its signed ``X-KVC-*`` headers). With its
    shortlist (route-and-reserve) this edge books one of its workers or refuses; without one it
    serves on the named worker, unbooked."""
    worker = st.relay_target(kvc[RELAY_HEADER])
    dep = st.service.deployment
    origin = _origin_region(kvc, dep.n_regions)
    raw_sl = kvc.get(SHORTLIST_HEADER)
    if raw_sl is not None and st.service.books:
        sl = decode_shortlist(raw_sl, dep.n_regions, dep.n_workers)
        if sl is None or sl.region != st.service.origin:
            raise shapes.ApiError(400, f"{SHORTLIST_HEADER}: expected a shortlist for this "
                                       f"region's workers, got {raw_sl[:80]!r}")  # fmt: skip
        ex, vec = st.service.on_relay(rid, parsed.tokens, sl, scope)
        if ex is None:
            headers = {**request[_IDS].headers(), REFUSED_HEADER: "1"}
            if vec is not None:
                headers[QUEUE_HEADER] = encode_queue_header(vec)
            st.service.metrics.inc("requests_total", endpoint=kind, status=REFUSED_STATUS)
            return web.Response(status=REFUSED_STATUS, headers=headers)
        cands = [w for w in [ex.plan.worker, *ex.order] if usable(w)][:1]
        if not cands:
            raise shapes.ApiError(503, "no reachable worker can serve this request",
                                  "service_unavailable", code="no_candidates")  # fmt: skip
        return await _proxy(request, st, kind, rid, raw, parsed, cands, ex, usable,
                            relay_origin=sl.origin)  # fmt: skip
    if not scope.allows(worker):
        raise shapes.ApiError(403, f"X-KVC-Forward-To: worker {worker} does not serve this "
                                   "model for this tenant", code="forbidden")  # fmt: skip
    return await _proxy(request, st, kind, rid, raw, parsed, [worker], None, usable,
                        relay_origin=origin)  # fmt: skip


def _origin_region(kvc: dict[str, str], n_regions: int) -> int | None:
    """The region of the edge that relayed the request (``ORIGIN_HEADER``), if it says so."""
    try:
        r = int(kvc.get(ORIGIN_HEADER, ""))
    except ValueError:
        return None
    return r if 0 <= r < n_regions else None


async def _proxy(
    request: web.Request,
    st: EdgeApp,
    kind: str,
    rid: str,
    raw: bytes,
    parsed: shapes.Parsed,
    cands: list[int],
    ex: Explained | None,
    usable: Callable[[int], bool],
    relay_headers: dict[str, str] | None = None,
    relay_origin: int | None = None,
) -> web.StreamResponse:
    """Send to the first candidate that answers (one retry; one re-decision after a refusal),
    then stream the answer back and feed the decider at the first byte and at the end.
    ``relay_origin``: this edge serves a peer's relay (piggyback its vector for that region)."""
    svc = st.service
    metrics = svc.metrics
    payload = isolation.payload(parsed, raw)
    headers = {"Content-Type": "application/json", "X-Request-Id": rid}  # the edge's id
    resp: UpstreamResponse | None = None
    worker = -1
    queue = list(cands)
    tried = 0
    refused = False
    while queue:
        w = queue.pop(0)
        if tried:
            metrics.inc("retries_total")
        tried += 1
        relayed = st.forwarder.relayed(w)
        hdrs = headers
        if ex is not None:
            svc.dispatch(ex, w, parsed.tokens, relayed=relayed)
            sl = svc.shortlist_for(ex, w) if relayed else None
            if relayed:
                hdrs = {**headers, ORIGIN_HEADER: str(svc.origin)}
            if sl is not None:
                hdrs[SHORTLIST_HEADER] = encode_shortlist(sl)
        try:
            resp = await unless_client_leaves(
                request, st.forwarder.send(w, parsed.worker_path, payload, hdrs,
                                           relay_headers=relay_headers),
            )  # fmt: skip
        except ClientLeft:
            if ex is not None:
                svc.undispatch(ex, w)
            metrics.inc("client_disconnect_total")
            log.debug("client left before worker %d answered: upstream request closed", w)
            return web.Response(status=499)  # nobody reads it (nginx's "client closed request")
        except ForwardError as err:
            if ex is not None:
                svc.undispatch(ex, w)
            metrics.inc("forward_failures_total", reason=err.reason)
            if ex is not None:
                ex.attempts.append({"worker": w, "error": str(err)[:300]})
            continue
        refusal = resp.status == REFUSED_STATUS and REFUSED_HEADER in resp.headers
        if refusal and relayed and ex is not None:  # only a peer edge refuses (never a worker)
            raw_qv = resp.headers.get(QUEUE_HEADER)
            resp.release()
            resp = None
            if refused:  # a final plan must be accepted; the owner did not: stop here
                raise shapes.ApiError(502, f"region of worker {w} refused a final relay",
                                      "upstream_error", code="relay_refused")  # fmt: skip
            refused = True
            vec = _vector(st, raw_qv)
            ex.attempts.append({"worker": w, "refused": True})
            queue = [x for x in svc.on_refused(ex, vec) if usable(x)][:2]
            continue
        worker = w
        break
    if resp is None:
        raise shapes.ApiError(502, f"no worker answered ({tried} tried)", "upstream_error",
                              code="upstream_unavailable")  # fmt: skip
    served = worker
    if st.forwarder.relayed(worker):  # the owner may have picked another of its workers
        named = resp.headers.get(WORKER_HEADER, "")
        if named.isdigit() and svc.worker_region_of(worker) == _region_or(svc, int(named)):
            served = int(named)
    if ex is not None:
        svc.on_accepted(rid, ex, served)
    out_headers = {**request[_IDS].headers(), WORKER_HEADER: str(served)}
    if relay_origin is not None:  # serving a relay: piggyback this region's vector
        vec_out = svc.piggyback(relay_origin)
        if vec_out is not None:
            out_headers[QUEUE_HEADER] = encode_queue_header(vec_out)
    qv = None
    raw_qv = resp.headers.get(QUEUE_HEADER) if st.forwarder.relayed(worker) else None
    if raw_qv is not None and ex is not None:  # a peer edge's piggyback (a worker has none)
        qv = _vector(st, raw_qv)
        metrics.inc("piggybacks_total", result="ok" if qv is not None else "malformed")

    def first(reused: int | None) -> None:
        if ex is not None:
            svc.on_first_token(ex, served, reused, qv)

    reused: int | None = None
    try:
        out, reused = await _answer(request, resp, parsed, out_headers, first, worker, rid)
    except (HTTPError, ConnectionError, asyncio.IncompleteReadError) as exc:
        raise shapes.ApiError(502, f"worker {worker} failed mid-response: {exc!r}"[:300],
                              "upstream_error") from None  # fmt: skip
    finally:
        resp.release()
        if ex is not None:
            svc.on_usage(ex, reused)
            svc.on_done(ex)
    metrics.inc("requests_total", endpoint=kind, status=out.status)
    return out


def _region_or(svc: EdgeService, worker: int) -> int:
    """The region of ``worker``, -1 if no such worker."""
    return svc.worker_region_of(worker) if 0 <= worker < svc.deployment.n_workers else -1


def _vector(st: EdgeApp, raw: str | None) -> QueueVector | None:
    if raw is None:
        return None
    dep = st.service.deployment
    return decode_queue_header(raw, dep.n_regions, dep.n_workers, st.service.clock_ms())


async def _answer(
    request: web.Request,
    resp: UpstreamResponse,
    parsed: shapes.Parsed,
    headers: dict[str, str],
    first: Callable[[int | None], None],
    worker: int,
    rid: str,
) -> tuple[web.StreamResponse, int | None]:
    """The client's answer (``edge.responses``): the worker's stream relayed to a client that
    asked for one, assembled into the whole body for one that did not; anything not streamed
    (an error status) as it came. ``first`` runs at the worker's first chunk either way."""
    st = _state(request)
    streamed = resp.headers.get("Content-Type", "").startswith("text/event-stream")
    if resp.status != 200 or not streamed:
        out, reused = await responses.whole(resp, parsed, headers)
        if resp.status == 200:
            first(reused)
        return out, reused
    if not parsed.stream:
        return await responses.assemble(request, resp, parsed, headers, first, worker)
    timeout_s = st.config.stream_write_timeout_ms / 1000.0
    out_s, reused, ended = await responses.relay(request, resp, parsed, headers, first,
                                                 timeout_s, worker, rid)  # fmt: skip
    if ended == "client_left":
        st.service.metrics.inc("client_disconnect_total")
    elif ended == "stuck":
        st.service.metrics.inc("stream_write_timeouts_total")
    return out_s, reused


__all__ = ["EDGE", "error_middleware", "make_completion_handler", "read_body", "request_id"]
