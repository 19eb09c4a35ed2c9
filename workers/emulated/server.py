"""HTTP front of the emulated SGLang worker: the endpoints this project uses, SGLang's shapes.

Owns the request/response JSON of ``POST /generate`` (``input_ids`` or ``text``,
``sampling_params.max_new_tokens``, ``stream`` as SSE, ``meta_info.cached_tokens`` and, on a hit,
``meta_info.cached_tokens_details {device, host}``), ``/v1/completions`` and
``/v1/chat/completions`` (with streaming; ``usage.prompt_tokens_details.cached_tokens``),
``GET /v1/loads`` and, opted in, ``GET /get_load`` (``load_api``), ``GET /metrics`` with
``enable_metrics`` (``metrics``), ``GET /server_info`` (with the
``kv_events`` block the sidecar discovers), ``GET /health``, ``GET /v1/models``,
``POST /flush_cache``; in PD mode (``disagg``) the bootstrap fields of SGLang's PD router and
the ``disaggregation_*`` server args in ``/server_info``. Errors are 400 JSON in SGLang's shapes
(``http_common``) with the request id echoed (``X-Request-Id``); the limits are SGLang's
(``limits``). Must not: hold cache or timing logic.

Body size: SGLang's server (FastAPI on uvicorn) sets no request body limit, so neither does this
one (aiohttp's default would answer 413 past 1 MiB, which a 128k-token prompt of ids exceeds):
a long prompt is refused by the context length, with SGLang's message, not by its size.

The tiny-llama KV copy routes (not SGLang's) are in ``kv_copy``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kvcompass.byte_tokenizer import detokenize, tokenize
from workers.emulated.cache import Admission
from workers.emulated.disagg import DISAGG, Disagg, TransferFailed, bootstrap_of
from workers.emulated.engine import ClientGone, Engine
from workers.emulated.http_common import (
    ENGINE,
    INFO,
    METRICS,
    BadRequest,
    Invalid,
    aborted,
    cache_salt,
    native_error,
    openai_error,
    run,
    sse,
    token_ids,
)
from workers.emulated.kv_copy import kv_export, kv_import
from workers.emulated.limits import check_context, check_max_new
from workers.emulated.load_api import get_load, loads
from workers.emulated.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from workers.emulated.metrics import WorkerMetrics
from workers.emulated.openai_api import models, openai

VERSION = "0.5.23-kvcompass-emulated"


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``GET /server_info`` reports, in SGLang 0.5.x's shape: the server args it emulates
    (``server_args.resolved_dict()``), ``kv_events`` as ``describe_kv_events_publisher`` builds
    it, and ``version``. ``events_endpoint``/``replay_endpoint`` are the dialable bound
    addresses; ``endpoint_host`` is the host as configured (``*`` = every interface)."""

    model: str
    page_size: int
    dp_size: int
    events_endpoint: str
    replay_endpoint: str | None
    topic: str
    endpoint_host: str = "*"
    enable_cache_report: bool = True
    stream_interval: int = 1
    host: str = "127.0.0.1"
    port: int = 30000
    context_length: int = 131_072
    disaggregation_mode: str = "null"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_transfer_backend: str = "mooncake"

    def as_json(self) -> dict[str, Any]:
        def port(ep: str | None) -> int | None:
            return int(ep.rpartition(":")[2]) if ep and ep.startswith("tcp://") else None

        def bound(ep: str | None) -> str | None:
            p = port(ep)
            return None if p is None else f"tcp://{self.endpoint_host}:{p}"

        cfg: dict[str, Any] = {
            "publisher": "zmq",
            "endpoint": bound(self.events_endpoint) or self.events_endpoint,
            "topic": self.topic,
        }
        if self.replay_endpoint is not None:
            cfg["replay_endpoint"] = bound(self.replay_endpoint) or self.replay_endpoint
        kv_events: dict[str, Any] | None = None
        if port(self.events_endpoint) is not None:
            kv_events = {
                "publisher": "zmq",
                "endpoint_host": self.endpoint_host,
                "endpoint_port_base": port(self.events_endpoint),
                "topic": self.topic,
                "block_size": self.page_size,
                "dp_size": self.dp_size,
            }
            if port(self.replay_endpoint) is not None:
                kv_events["replay_endpoint_port_base"] = port(self.replay_endpoint)
        return {
            "model_path": self.model,
            "tokenizer_path": self.model,
            "served_model_name": self.model,
            "host": self.host,
            "port": self.port,
            "page_size": self.page_size,
            "dp_size": self.dp_size,
            "attn_dp_size": 1,
            "enable_cache_report": self.enable_cache_report,
            "stream_interval": self.stream_interval,
            "context_length": self.context_length,
            "disaggregation_mode": self.disaggregation_mode,
            "disaggregation_bootstrap_port": self.disaggregation_bootstrap_port,
            "disaggregation_transfer_backend": self.disaggregation_transfer_backend,
            "kv_events_config": json.dumps(cfg),
            "kv_events": kv_events,
            "internal_states": [{}],
            "version": VERSION,
        }


def _meta(rid: str, adm: Admission, out: int, start: float, done: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": rid,
        "prompt_tokens": adm.prompt_tokens,
        "completion_tokens": out,
        "cached_tokens": adm.cached_tokens,
        "finish_reason": {"type": "length", "length": out} if done else None,
        "e2e_latency": time.perf_counter() - start,
    }
    if adm.cached_tokens:
        meta["cached_tokens_details"] = {
            "device": adm.device_hit_tokens,
            "host": adm.host_hit_tokens,
        }
    return meta


async def generate(request: web.Request) -> web.StreamResponse:
    rid = request.headers.get("X-Request-Id", uuid.uuid4().hex)
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise Invalid("body: expected a JSON object")
        rid = str(body.get("rid") or rid)
        if "input_ids" in body:
            tokens = token_ids(body["input_ids"], "input_ids")
        elif isinstance(body.get("text"), str):
            tokens = tokenize(body["text"])
        else:
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise Invalid("sampling_params: expected an object")
        asked = params.get("max_new_tokens")
        check_max_new(asked)
        check_context(len(tokens), asked, int(request.app[INFO]["context_length"]))
        disagg = request.app[DISAGG]
        bootstrap = bootstrap_of(body, disagg.mode)
        salt = cache_salt(body)
    except (Invalid, json.JSONDecodeError) as exc:
        return openai_error(str(exc), rid, err_type="Bad Request")
    except BadRequest as exc:
        return native_error(str(exc), rid)
    max_new = disagg.max_new(128 if asked is None else asked)
    start = time.perf_counter()
    try:
        pd = (disagg, bootstrap)
        stream = bool(body.get("stream"))
        adm, steps = await run(request.app[ENGINE], tokens, max_new, request, rid, pd, salt, stream)
    except ClientGone as exc:
        return aborted(exc, rid, openai=False)
    except TransferFailed as exc:
        return native_error(str(exc), rid, status=500)
    out: list[int] = []
    if body.get("stream"):

        async def chunks() -> AsyncIterator[dict[str, Any]]:
            if max_new == 0:
                yield {"text": "", "output_ids": [], "meta_info": _meta(rid, adm, 0, start, True)}
            every = request.app[ENGINE].stream_interval
            async for t in steps:
                out.append(t)
                n = len(out)
                if n == 1 or n == max_new or (n - 1) % every == 0:
                    meta = _meta(rid, adm, n, start, n == max_new)
                    yield {"text": detokenize(out), "output_ids": list(out), "meta_info": meta}

        try:
            return await sse(request, chunks())
        finally:  # a client that left mid-stream: the request is done (running count, KV)
            await steps.aclose()
    try:
        out = [t async for t in steps]
    except ClientGone as exc:
        return aborted(exc, rid, openai=False)
    finally:
        await steps.aclose()
    meta = _meta(rid, adm, len(out), start, True)
    body_out = {"text": detokenize(out), "output_ids": out, "meta_info": meta}
    return web.json_response(body_out, headers={"X-Request-Id": rid})


async def server_info(request: web.Request) -> web.Response:
    return web.json_response(request.app[INFO])


async def health(request: web.Request) -> web.Response:
    return web.Response(text="")


async def model_info(request: web.Request) -> web.Response:
    """SGLang's ``/model_info`` (what its gateway reads when a worker registers)."""
    info = request.app[INFO]
    return web.json_response({
        "model_path": info["model_path"], "served_model_name": info["served_model_name"],
        "tokenizer_path": info["tokenizer_path"], "is_generation": True,
        "preferred_sampling_params": None, "weight_version": "default",
        "has_image_understanding": False, "has_audio_understanding": False,
        "model_type": "llama", "architectures": ["LlamaForCausalLM"],
    })  # fmt: skip


async def flush_cache(request: web.Request) -> web.Response:
    await request.app[ENGINE].flush()
    return web.Response(text="Cache flushed.\n")


async def metrics(request: web.Request) -> web.Response:
    """``GET /metrics`` (only with ``enable_metrics``, as SGLang's ``--enable-metrics``)."""
    app = request.app
    body = app[METRICS].render(app[ENGINE], int(app[INFO]["context_length"]))
    return web.Response(body=body.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})


def build_app(
    engine: Engine,
    info: ServerInfo,
    disagg: Disagg | None = None,
    *,
    enable_metrics: bool = False,
    enable_get_load: bool = False,
) -> web.Application:
    """The routes; ``/metrics`` only with ``enable_metrics`` and ``/get_load`` only with
    ``enable_get_load``: without them both are 404, as on SGLang 0.5.23 (``load_api``,
    ``metrics``)."""
    app = web.Application(client_max_size=0)  # 0: no limit (SGLang's uvicorn has none)
    app[ENGINE] = engine
    app[DISAGG] = d = disagg if disagg is not None else Disagg("null", "mooncake")
    app[INFO] = info.as_json()
    app[METRICS] = WorkerMetrics(info.model, d.mode)
    if enable_metrics:
        app.router.add_get("/metrics", metrics)
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/completions", openai)
    app.router.add_post("/v1/chat/completions", openai)
    app.router.add_get("/v1/loads", loads)
    if enable_get_load:
        app.router.add_get("/get_load", get_load)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/model_info", model_info)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/flush_cache", flush_cache)
    app.router.add_post("/kv/export", kv_export)
    app.router.add_post("/kv/import", kv_import)
    return app
