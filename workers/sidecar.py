"""The sidecar process: engine discovery, then bridge + load reporter + migration executor.

Owns the wiring from ``SidecarConfig`` + ``PipelineConfig`` + deployment to the three loops,
run together under one ``asyncio.TaskGroup`` (any loop failing stops the others), and the
``/server_info`` discovery of the engine's KV-events endpoints. Must not: hold the loops' logic.

Discovery reads ``kv_events`` (the emulated worker's block) or, from a real SGLang, the server
args ``kv_events_config`` (a JSON string), ``page_size`` and ``dp_size``; a wildcard bind
(``tcp://*:5557``) is reached at the engine URL's host.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

import aiohttp
import zmq.asyncio
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from kvcompass.deployment import Deployment
from kvcompass.keys import KeyNamespace
from kvcompass.levels import Levels
from pipeline.codec import AvroCodec, DecodeError, int32_key
from pipeline.config import PipelineConfig
from pipeline.producer import ProducerPort
from workers.bridge import RankBridge
from workers.bridge_zmq import bridge_rank
from workers.config import SidecarConfig
from workers.load_reporter import LoadReporter
from workers.migration import MigrationExecutor

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineEvents:
    events_endpoint: str
    replay_endpoint: str | None
    topic: str
    page_size_tokens: int
    dp_size: int


def _reach(endpoint: str | None, host: str) -> str | None:
    if endpoint is None:
        return None
    for wild in ("://*:", "://0.0.0.0:", "://[::]:"):
        endpoint = endpoint.replace(wild, f"://{host}:")
    return endpoint


def parse_server_info(info: Mapping[str, Any], engine_url: str) -> EngineEvents:
    """KV-event endpoints from a ``/server_info`` body. Raises ValueError if events are off."""
    block = info.get("kv_events")
    if not isinstance(block, Mapping):
        raw = info.get("kv_events_config")
        block = json.loads(raw) if isinstance(raw, str) and raw else None
    if not isinstance(block, Mapping) or block.get("publisher", "zmq") != "zmq":
        raise ValueError("engine /server_info: expected a zmq kv_events config, events are off")
    host = urlparse(engine_url).hostname or "127.0.0.1"
    endpoint = _reach(str(block.get("endpoint") or "tcp://*:5557"), host)
    assert endpoint is not None
    return EngineEvents(
        endpoint,
        _reach(block.get("replay_endpoint"), host),
        str(block.get("topic") or ""),
        int(block.get("block_size") or info.get("page_size") or 1),
        int(block.get("dp_size") or info.get("dp_size") or 1),
    )


async def discover(engine_url: str, timeout_s: float = 5.0) -> EngineEvents:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.get(engine_url.rstrip("/") + "/server_info") as resp,
    ):
        resp.raise_for_status()
        return parse_server_info(await resp.json(), engine_url)


def apply_discovery(cfg: SidecarConfig, found: EngineEvents) -> SidecarConfig:
    return replace(
        cfg,
        events_endpoint=found.events_endpoint,
        replay_endpoint=found.replay_endpoint,
        events_topic=found.topic,
        page_size_tokens=found.page_size_tokens,
        dp_size=found.dp_size,
    )


def make_bridges(cfg: SidecarConfig, dep: Deployment) -> list[RankBridge]:
    levels = Levels.from_deployment(dep)
    ns = KeyNamespace(cfg.model, cfg.model_config, cfg.sharing_group)
    out = []
    for r in range(cfg.dp_size):
        worker = cfg.worker_id + r
        if worker >= dep.n_workers:
            raise ValueError(f"worker {worker}: expected < {dep.n_workers} (deployment workers)")
        region = int(dep.worker_region[worker])
        out.append(RankBridge(worker, region, ns, levels.registration_lengths(region).tolist()))
    return out


def kv_emitter(
    sink: ProducerPort, codec: AvroCodec, topic: str, worker_id: int
) -> Callable[[list[dict[str, Any]]], None]:
    key = int32_key(worker_id)

    def emit(records: list[dict[str, Any]]) -> None:
        for rec in records:
            sink.produce(topic, codec.encode("KvEvent", rec), key)

    return emit


async def run_migrations(
    executor: MigrationExecutor,
    pipe: PipelineConfig,
    codec: AvroCodec,
    timeout_s: float,
    offset_reset: str = "latest",
) -> None:
    """Every sidecar reads every migration (its own consumer group) and keeps its own."""
    consumer = AIOKafkaConsumer(
        *pipe.mirrored(pipe.topics.migrations),  # + MirrorMaker 2 copies from other regions
        bootstrap_servers=pipe.bootstrap_servers,
        group_id=f"kvcompass-migrate-{pipe.topic_prefix}w{executor.worker_id}",
        auto_offset_reset=offset_reset,
    )
    await consumer.start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
            async for msg in consumer:
                try:
                    _, rec = codec.decode(msg.value or b"")
                except DecodeError as exc:
                    log.warning("migrations: undecodable record skipped: %s", exc)
                    continue
                if executor.accept(rec):
                    await executor.execute(http, rec)
    finally:
        await consumer.stop()


async def log_stats(bridges: list[RankBridge], period_s: float = 30.0) -> None:
    """The bridges' counters (degraded, orphans, gaps...) as one log line per rank per period."""
    while True:
        await asyncio.sleep(period_s)
        for b in bridges:
            log.info("bridge worker %d: %s", b.worker_id, json.dumps(b.stats_dict()))


async def run_sidecar(
    cfg: SidecarConfig,
    pipe: PipelineConfig,
    dep: Deployment,
    sink: ProducerPort,
    codec: AvroCodec,
    *,
    bridge: bool = True,
    load: bool = True,
    migrate: bool = True,
) -> None:
    """Run the chosen loops until cancelled or one fails."""
    ctx = zmq.asyncio.Context()
    try:
        async with asyncio.TaskGroup() as tg:
            if bridge:
                bridges = make_bridges(cfg, dep)
                tg.create_task(log_stats(bridges))
                for b, ev, rp in zip(
                    bridges,
                    cfg.events_endpoints(),
                    cfg.replay_endpoints(),
                    strict=True,
                ):
                    emit = kv_emitter(sink, codec, pipe.topics.kv_events, b.worker_id)
                    tg.create_task(
                        bridge_rank(b, ctx, ev, rp, cfg.events_topic, emit, cfg.replay_timeout_ms)
                    )
            if load:
                region = int(dep.worker_region[cfg.worker_id])
                reporter = LoadReporter(
                    region,
                    cfg.reported_workers(),
                    dep.regions[region].prefill_ms_per_token,
                    cfg.load_period_ms,
                    sink,
                    codec,
                    pipe.topics.queue_vectors,
                )
                tg.create_task(reporter.run())
            if migrate:
                executor = MigrationExecutor(
                    cfg.worker_id, cfg.engine_url, cfg.migration_dedupe_entries, dict(cfg.peers)
                )
                tg.create_task(
                    run_migrations(executor, pipe, codec, cfg.migration_timeout_ms / 1000)
                )
    finally:
        ctx.term()
