"""``EmulatedWorker``: wires cache, cost model, publisher, engine and HTTP app, and runs them.

Owns ``EmulatedConfig`` (one frozen config: model, page size, tier capacities, eviction policy,
costs, KV-events endpoints) and the lifecycle (bind, serve, close). Must not: hold request logic.
Port 0 (HTTP) and ``tcp://127.0.0.1:*`` (ZMQ) bind free ports; ``/server_info`` advertises the
bound addresses, so a sidecar can discover them. Tiny-llama mode imports torch (only then) and
sets its intra-op threads for the whole process (``torch_threads``, default 1: the emulated
workers share a few cores with each other).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import TYPE_CHECKING, Any

import zmq.asyncio
from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from kvcompass.errors import ConfigError
from workers.emulated.cache import PrefixCache
from workers.emulated.costs import EmulatedCosts
from workers.emulated.disagg import Disagg, bootstrap_app, check_mode
from workers.emulated.engine import Engine
from workers.emulated.http_common import INFO
from workers.emulated.publisher import EventPublisher
from workers.emulated.server import ServerInfo, build_app

if TYPE_CHECKING:
    from workers.emulated.tiny_llama import TinyLlamaConfig


@dataclass(frozen=True, slots=True)
class EmulatedConfig:
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    host: str = "127.0.0.1"
    port: int = 30000
    page_size_tokens: int = 16
    vram_tokens: int = 262_144
    dram_tokens: int = 1_048_576
    radix_eviction_policy: str = "lru"
    chunked_prefill_size: int = 4096
    """SGLang's ``--chunked-prefill-size``; its default on a 32 GB GPU (the RTX 5090 emulated)."""
    """SGLang's ``--radix-eviction-policy`` (its choices lru and lfu are emulated)."""
    events_endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = "tcp://*:5558"
    events_topic: str = "kv-events"
    replay_buffer_steps: int = 10_000
    replay_topic_frame: bool = True
    """True: SGLang 0.5.23 replies [topic, seq, payload]; False: older [seq, payload]."""
    costs: EmulatedCosts = field(default_factory=EmulatedCosts)
    tiny_llama: TinyLlamaConfig | None = None
    """Set: real KV tensors from a torch tiny Llama, CPU (the CLI's ``--model tiny-llama``)."""
    torch_threads: int = 1
    """torch intra-op threads in tiny-llama mode (process-wide)."""
    stream_interval: int = 1
    """SGLang's ``--stream-interval`` (default 1): streamed chunks carry this many tokens after
    the first one. Larger values cut the per-token CPU of many emulated workers on one host."""
    enable_cache_report: bool = True
    """SGLang's ``--enable-cache-report``: ``usage.prompt_tokens_details.cached_tokens`` in
    OpenAI responses (without it SGLang sends ``prompt_tokens_details: null``)."""
    context_length_tokens: int = 131_072
    """SGLang's ``--context-length`` (default: the model's; 131,072 for Llama-3.1-8B). Longer
    inputs, and input + asked output over it, are refused with SGLang's 400s (``limits``)."""
    enable_metrics: bool = False
    """SGLang's ``--enable-metrics``: serve ``GET /metrics`` (SGLang 0.5.23's ``sglang:`` names,
    ``metrics``); off, the route does not exist (404), as on SGLang."""
    enable_get_load: bool = False
    """Serve ``GET /get_load`` in the legacy shape of the SGLang releases that had it (what
    ``sglang-router``'s ``power_of_two`` polls for token loads). Off (default), 404, as SGLang
    0.5.23, which has no such route and no flag for it: the router then has no loads from ours,
    as from a real one (``load_api``). The flag is ours (``--enable-get-load``)."""
    shutdown_timeout_s: float = 3.0
    """On close (SIGTERM): how long in-flight requests may still finish (wall seconds) before
    they are cancelled. SGLang drains every request first, but its requests finish at GPU
    speed; an emulated worker's abandoned ones could decode for minutes (aiohttp's 60 s default
    made workers take 60-120 s to exit)."""

    disaggregation_mode: str = "null"
    """SGLang's ``--disaggregation-mode``: ``null`` (prefill and decode here), ``prefill`` or
    ``decode`` (``disagg``)."""
    disaggregation_bootstrap_port: int = 8998
    """SGLang's ``--disaggregation-bootstrap-port`` (prefill mode: its bootstrap server; 0 = a
    free port, reported in ``/server_info``)."""
    disaggregation_transfer_backend: str = "mooncake"
    """SGLang's ``--disaggregation-transfer-backend`` (reported; ``fake``: no transfer)."""

    def __post_init__(self) -> None:
        check_mode(self.disaggregation_mode, self.disaggregation_transfer_backend,
                   self.disaggregation_bootstrap_port)  # fmt: skip
        if self.disaggregation_mode != "null" and self.tiny_llama is not None:
            raise ConfigError("disaggregation_mode: cost-model mode only (not tiny-llama)")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"port: expected 0..65535, got {self.port}")
        if self.replay_buffer_steps < 1:
            raise ConfigError(f"replay_buffer_steps: expected >= 1, got {self.replay_buffer_steps}")
        if self.stream_interval < 1:
            raise ConfigError(f"stream_interval: expected >= 1, got {self.stream_interval}")
        if self.torch_threads < 1:
            raise ConfigError(f"torch_threads: expected >= 1, got {self.torch_threads}")
        if self.context_length_tokens < 2:
            got = self.context_length_tokens
            raise ConfigError(f"context_length_tokens: expected >= 2, got {got}")
        if self.shutdown_timeout_s < 0:
            raise ConfigError(f"shutdown_timeout_s: expected >= 0, got {self.shutdown_timeout_s}")


log = logging.getLogger(__name__)


class _Http2ProbeFilter(logging.Filter):
    """SGLang's gateway (sgl-router) first probes each worker for gRPC, i.e. HTTP/2 with prior
    knowledge; aiohttp answers the preface with 400 and would log it as an error with a
    traceback. A probe is not a fault of this server: one debug line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BadHttpMessage) and "PRI/Upgrade" in str(exc):
            log.debug("HTTP/2 (gRPC) probe on the HTTP/1.1 port answered 400")
            return False
        return True


_HTTP_LOG = logging.getLogger("workers.emulated.http")
_HTTP_LOG.addFilter(_Http2ProbeFilter())


def kv_events_fields(raw: str) -> dict[str, Any]:
    """``EmulatedConfig`` fields from SGLang's ``--kv-events-config`` JSON (``KVEventsConfig``:
    publisher, endpoint, replay_endpoint, topic, buffer_steps; hwm / max_queue_size / bind /
    format are accepted and have no effect here). Also ``tcp://host:*``: a free port."""
    try:
        cfg = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--kv-events-config: expected JSON, got {raw!r}: {exc}") from exc
    known = {"publisher", "endpoint", "replay_endpoint", "topic", "buffer_steps", "hwm",
             "max_queue_size", "bind", "format"}  # fmt: skip
    if not isinstance(cfg, dict) or not set(cfg) <= known:
        raise ConfigError(f"--kv-events-config: expected an object with keys in {sorted(known)}")
    if cfg.get("publisher", "null") != "zmq":
        raise ConfigError(f"--kv-events-config: the emulated worker publishes zmq, got {raw!r}")
    out: dict[str, Any] = {
        "events_endpoint": str(cfg.get("endpoint", "tcp://*:5557")),
        "replay_endpoint": cfg.get("replay_endpoint"),
        "events_topic": str(cfg.get("topic", "")),
    }
    if "buffer_steps" in cfg:
        out["replay_buffer_steps"] = int(cfg["buffer_steps"])
    return out


def _host_of(endpoint: str) -> str:
    host = endpoint.removeprefix("tcp://").rpartition(":")[0]
    return host or "*"


def _advertised(endpoint: str, host: str) -> str:
    # A wildcard bind is reachable at the HTTP host, as SGLang's "tcp://*:5557" is.
    return endpoint.replace("://*:", f"://{host}:").replace("://0.0.0.0:", f"://{host}:")


class EmulatedWorker:
    """``async with EmulatedWorker(cfg) as w:`` serves until the block exits."""

    def __init__(self, config: EmulatedConfig) -> None:
        self.config = config
        self._ctx = zmq.asyncio.Context()
        c = config
        self.publisher = EventPublisher(
            self._ctx,
            c.events_endpoint,
            c.replay_endpoint,
            c.events_topic,
            buffer_steps=c.replay_buffer_steps,
            replay_topic_frame=c.replay_topic_frame,
        )
        cache = PrefixCache(
            c.page_size_tokens, c.vram_tokens, c.dram_tokens, c.radix_eviction_policy
        )
        model = None
        if c.tiny_llama is not None:
            import torch

            from workers.emulated.tiny_llama import TinyLlama

            torch.set_num_threads(c.torch_threads)
            model = TinyLlama(c.tiny_llama)
        self.engine = Engine(
            cache, c.costs, self.publisher, model, c.stream_interval, c.chunked_prefill_size
        )
        replay = self.publisher.replay_endpoint
        self.info = ServerInfo(
            c.model,
            c.page_size_tokens,
            1,
            _advertised(self.publisher.endpoint, c.host),
            None if replay is None else _advertised(replay, c.host),
            c.events_topic,
            endpoint_host=_host_of(c.events_endpoint),
            enable_cache_report=c.enable_cache_report,
            stream_interval=c.stream_interval,
            host=c.host,
            port=c.port,
            context_length=c.context_length_tokens,
            disaggregation_mode=c.disaggregation_mode,
            disaggregation_bootstrap_port=c.disaggregation_bootstrap_port,
            disaggregation_transfer_backend=c.disaggregation_transfer_backend,
        )
        self.disagg = Disagg(c.disaggregation_mode, c.disaggregation_transfer_backend)
        self._runner: web.AppRunner | None = None
        self._bootstrap: web.AppRunner | None = None
        self._replay_task: asyncio.Task[None] | None = None
        self.url = ""

    async def start(self) -> None:
        c = self.config
        app = build_app(self.engine, self.info, self.disagg, enable_metrics=c.enable_metrics,
                        enable_get_load=c.enable_get_load)  # fmt: skip
        self._runner = web.AppRunner(app, access_log=None, logger=_HTTP_LOG,
                                     shutdown_timeout=self.config.shutdown_timeout_s)  # fmt: skip
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.config.host, self.config.port)
        await site.start()
        port = int(self._runner.addresses[0][1])
        self.url = f"http://{self.config.host}:{port}"
        self.info = replace(self.info, port=port)
        if self.config.disaggregation_mode == "prefill":  # SGLang's bootstrap server
            grace = self.config.shutdown_timeout_s
            boot_app = bootstrap_app(self.disagg)
            self._bootstrap = web.AppRunner(boot_app, access_log=None, shutdown_timeout=grace)
            await self._bootstrap.setup()
            boot = web.TCPSite(self._bootstrap, self.config.host,
                               self.config.disaggregation_bootstrap_port)  # fmt: skip
            await boot.start()
            bound = int(self._bootstrap.addresses[0][1])
            self.info = replace(self.info, disaggregation_bootstrap_port=bound)
        app[INFO].update(self.info.as_json())  # in place: a started app's state is frozen
        self._replay_task = asyncio.create_task(self.publisher.serve_replay())

    async def close(self) -> None:
        if self._replay_task is not None:
            self._replay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._replay_task
        if self._runner is not None:
            await self._runner.cleanup()
        if self._bootstrap is not None:
            await self._bootstrap.cleanup()
        await self.disagg.close()
        self.publisher.close()
        self._ctx.term()

    async def __aenter__(self) -> EmulatedWorker:
        await self.start()
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def serve_forever(self) -> None:
        async with self:
            await asyncio.Event().wait()
