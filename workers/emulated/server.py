"""HTTP front of the emulated SGLang worker: the endpoints this project uses, SGLang's shapes.

Owns the request/response JSON of ``POST /generate`` (``input_ids`` or ``text``,
``sampling_params.max_new_tokens``, ``stream`` as SSE, ``meta_info.cached_tokens`` and, on a hit,
``meta_info.cached_tokens_details {device, host}``), ``/v1/completions`` and
``/v1/chat/completions`` (with streaming; ``usage.prompt_tokens_details.cached_tokens``),
``GET /v1/loads``, ``GET /server_info`` (with the ``kv_events`` block the sidecar discovers),
``GET /health``, ``GET /v1/models``, ``POST /flush_cache``. Errors are 4xx JSON in the OpenAI
error shape with the request id echoed (``X-Request-Id``). Must not: hold cache or timing logic.

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
from kvcompass.types import Tier
from workers.emulated.cache import Admission
from workers.emulated.engine import ClientGone, Engine
from workers.emulated.http_common import (
    ENGINE,
    INFO,
    BadRequest,
    aborted,
    error,
    parse_max_new,
    run,
    sse,
    token_ids,
)
from workers.emulated.kv_copy import kv_export, kv_import
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
            raise BadRequest("body: expected a JSON object")
        rid = str(body.get("rid") or rid)
        if "input_ids" in body:
            tokens = token_ids(body["input_ids"], "input_ids")
        elif isinstance(body.get("text"), str):
            tokens = tokenize(body["text"])
        else:
            raise BadRequest("expected 'input_ids' (list of ints) or 'text' (string)")
        params = body.get("sampling_params") or {}
        max_new = parse_max_new(params.get("max_new_tokens"), 128)
    except (BadRequest, json.JSONDecodeError, AttributeError) as exc:
        return error(400, str(exc), rid)
    start = time.perf_counter()
    try:
        adm, steps = await run(request.app[ENGINE], tokens, max_new, request)
    except ClientGone:
        return aborted(rid)
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
    out = [t async for t in steps]
    meta = _meta(rid, adm, len(out), start, True)
    body_out = {"text": detokenize(out), "output_ids": out, "meta_info": meta}
    return web.json_response(body_out, headers={"X-Request-Id": rid})


async def loads(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    ld, cache = engine.loads, engine.cache
    used = cache.usage_tokens(Tier.VRAM)
    cap = cache.vram_pages * cache.page_size
    return web.json_response(
        {
            "timestamp": time.time(),
            "loads": [
                {
                    "dp_rank": 0,
                    "num_running_reqs": ld.running,
                    "num_waiting_reqs": ld.waiting,
                    "num_waiting_uncached_tokens": engine.waiting_uncached_tokens(),
                    "num_used_tokens": used,
                    "max_total_num_tokens": cap,
                    "token_usage": used / cap if cap else 0.0,
                    "total_prefill_busy_us": ld.prefill_busy_us,
                    "total_prefill_uncached_tokens": ld.prefill_uncached_tokens,
                    "num_requests": ld.requests,
                }
            ],
        }
    )


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


def build_app(engine: Engine, info: ServerInfo) -> web.Application:
    app = web.Application()
    app[ENGINE] = engine
    app[INFO] = info.as_json()
    app.router.add_post("/generate", generate)
    app.router.add_post("/v1/completions", openai)
    app.router.add_post("/v1/chat/completions", openai)
    app.router.add_get("/v1/loads", loads)
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
