"""The sidecar process: engine discovery, then bridge + load reporter + migration executor.

Owns the wiring from ``SidecarConfig`` + ``PipelineConfig`` + deployment to the three loops,
run together under one ``asyncio.TaskGroup`` (any loop failing stops the others), and the
``/server_info`` discovery of the engine's KV-events endpoints. Must not: hold the loops' logic.

Discovery reads SGLang 0.5.x's ``kv_events`` block (per-rank ports = base + rank; a wildcard
``endpoint_host`` is reached at the engine URL's host), falling back to the server args
``kv_events_config`` (a JSON string), ``page_size`` and ``dp_size``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

import aiohttp
import zmq.asyncio
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]
from confluent_kafka.admin import AdminClient

from kvcompass.deployment import Deployment
from kvcompass.keys import KeyNamespace
from kvcompass.levels import Levels
from wire.codec import AvroCodec, DecodeError, int32_key
from wire.config import PipelineConfig
from wire.dead_letter import dead_letter_record
from wire.kafka_clients import aiokafka_kwargs, librdkafka_conf
from wire.producer import ProducerPort
from wire.stopping import budget
from wire.topics import ensure_topics
from workers.bridge import RankBridge
from workers.bridge_zmq import bridge_rank
from workers.config import SidecarConfig
from workers.load_reporter import CacheStates, LoadReporter
from workers.migration import MigrationExecutor
from workers.protocol import Rejected

log = logging.getLogger(__name__)
CONSUMER_STOP_S = 5.0


@dataclass(frozen=True, slots=True)
class EngineEvents:
    """Rank 0's endpoints; rank r is at the same hosts with ports + r (``SidecarConfig``)."""

    events_endpoint: str
    replay_endpoint: str | None
    topic: str
    page_size_tokens: int
    dp_size: int


_WILDCARDS = frozenset({"*", "0.0.0.0", "::", "[::]", ""})


def _dial_host(host: str | None, engine_url: str) -> str:
    """A bind wildcard is reached at the worker URL's host (SGLang's rule for subscribers)."""
    if host is not None and host not in _WILDCARDS:
        return host
    url_host = urlparse(engine_url).hostname or "127.0.0.1"
    return f"[{url_host}]" if ":" in url_host else url_host


def _reach(endpoint: str | None, engine_url: str) -> str | None:
    if endpoint is None or not endpoint.startswith("tcp://"):
        return endpoint
    host, _, port = endpoint.removeprefix("tcp://").rpartition(":")
    return f"tcp://{_dial_host(host, engine_url)}:{port}"


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"engine /server_info: {what}: expected an int >= 1, got {value!r}")
    return value


def parse_server_info(info: Mapping[str, Any], engine_url: str) -> EngineEvents:
    """KV-event endpoints from a ``/server_info`` body. Raises ValueError if events are off.

    SGLang 0.5.x: ``kv_events = {publisher, endpoint_host, endpoint_port_base,
    replay_endpoint_port_base?, topic, block_size, dp_size}`` (``describe_kv_events_publisher``;
    null when publishing is off or the endpoint is not tcp). Otherwise the server args:
    ``kv_events_config`` (the ``--kv-events-config`` JSON string), ``page_size``, ``dp_size``.
    """
    block = info.get("kv_events")
    if isinstance(block, Mapping) and "endpoint_port_base" in block:
        if block.get("publisher", "zmq") != "zmq":
            raise ValueError(f"engine /server_info: expected publisher zmq, got {block!r}")
        host = _dial_host(block.get("endpoint_host"), engine_url)
        base = _positive(block.get("endpoint_port_base"), "kv_events.endpoint_port_base")
        replay_base = block.get("replay_endpoint_port_base")
        replay = None
        if replay_base is not None:
            replay = f"tcp://{host}:{_positive(replay_base, 'replay_endpoint_port_base')}"
        return EngineEvents(
            f"tcp://{host}:{base}",
            replay,
            str(block.get("topic") or ""),
            _positive(block.get("block_size"), "kv_events.block_size"),
            _positive(block.get("dp_size", 1), "kv_events.dp_size"),
        )
    raw = info.get("kv_events_config")
    try:
        cfg = json.loads(raw) if isinstance(raw, str) and raw else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"engine /server_info: kv_events_config is not JSON: {exc}") from exc
    if not isinstance(cfg, Mapping) or cfg.get("publisher", "null") != "zmq":
        raise ValueError(
            "engine /server_info: expected a kv_events block or a zmq kv_events_config "
            f"(start SGLang with --kv-events-config), got kv_events={block!r}, "
            f"kv_events_config={raw!r}"
        )
    endpoint = _reach(str(cfg.get("endpoint") or "tcp://*:5557"), engine_url)
    assert endpoint is not None
    dp = _positive(info.get("dp_size", 1), "dp_size") * _positive(
        info.get("attn_dp_size", 1) or 1, "attn_dp_size"
    )
    return EngineEvents(
        endpoint,
        _reach(cfg.get("replay_endpoint"), engine_url),
        str(cfg.get("topic") or ""),
        _positive(info.get("page_size"), "page_size"),
        dp,
    )


async def discover(engine_url: str, timeout_s: float = 5.0, wait_s: float = 120.0) -> EngineEvents:
    """``/server_info`` of the engine, waiting up to ``wait_s`` for it to come up (a sidecar
    started with its engine, or before it, must not fail while the engine loads)."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    deadline = time.monotonic() + wait_s
    async with aiohttp.ClientSession(timeout=timeout) as http:
        while True:
            try:
                async with http.get(engine_url.rstrip("/") + "/server_info") as resp:
                    resp.raise_for_status()
                    return parse_server_info(await resp.json(), engine_url)
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise ConnectionError(
                        f"engine {engine_url}: no /server_info within {wait_s:.0f} s: {exc!r}"
                    ) from exc
                log.info("engine %s not up yet (%r); retrying", engine_url, exc)
                await asyncio.sleep(1.0)


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


def dead_letter_filer(
    sink: ProducerPort, codec: AvroCodec, topic: str, worker_id: int, endpoint: str
) -> Callable[[int, Rejected], None]:
    """Files an undecodable engine event on ``dead-letters``: the ZMQ endpoint stands for the
    topic, the batch sequence for the offset, the event's msgpack bytes as read."""
    source = f"zmq:{endpoint}"

    def reject(seq: int, rej: Rejected) -> None:
        rec = dead_letter_record(
            topic=source,
            partition=0,
            offset=seq,
            key=int32_key(worker_id),
            raw=rej.raw,
            reason_code="UNDECODABLE",
            reason=rej.reason,
            consumer=f"kvcompass-bridge-w{worker_id}",
            now_ms=int(time.time() * 1000),
        )
        log.warning("worker %d: dead-lettered an undecodable event: %s", worker_id, rej.reason)
        sink.produce(topic, codec.encode("DeadLetter", rec), source.encode())

    return reject


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
        **aiokafka_kwargs(pipe),
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
        # aiokafka's stop commits and leaves the group, retrying while the broker is gone: bound
        # it (the committed position only decides which migrations a restart re-reads), leaving
        # the producer's flush its share of the stop (wire.stopping.budget; 1 s without broker)
        stop_s = budget(CONSUMER_STOP_S, reserve_s=2.0)
        try:
            await asyncio.wait_for(consumer.stop(), stop_s)
        except TimeoutError:
            log.warning("migrations consumer: not stopped within %.1f s (broker unreachable?); "
                        "its last position may not be committed", stop_s)  # fmt: skip


def bridge_cache_states(bridges: list[RankBridge]) -> CacheStates:
    """What the load reporter says of the bridged workers' caches (degraded = unknown)."""

    def states() -> tuple[list[int], list[int]]:
        return [b.worker_id for b in bridges], [b.worker_id for b in bridges if b.stats.degraded]

    return states


async def log_stats(bridges: list[RankBridge], period_s: float = 30.0) -> None:
    """The bridges' counters (degraded, orphans, gaps...) as one log line per rank per period."""
    while True:
        await asyncio.sleep(period_s)
        for b in bridges:
            log.info("bridge worker %d: %s", b.worker_id, json.dumps(b.stats_dict()))


async def serve_deliveries(sink: ProducerPort, period_s: float = 0.5) -> None:
    """Serve the producer's delivery reports while the sidecar is idle too, so a failed delivery
    is logged (``KafkaProducer``) when Kafka reports it, not at the next record or shutdown."""
    while True:
        sink.poll(0)
        await asyncio.sleep(period_s)


def flush_or_say(sink: ProducerPort, timeout_s: float, who: str) -> int:
    """Flush the producer for up to ``timeout_s``; say what could not be delivered (the records
    are lost to the index: the worker's next sidecar start publishes CLEARED, so the index
    forgets what it cannot know). Returns the records left."""
    left = sink.flush(timeout_s)
    if left:
        log.error("%s stopping: %d records not delivered within %.0f s (broker unreachable?); "
                  "they are lost, the next start of this sidecar clears the worker's index "
                  "entries (CLEARED)", who, left, timeout_s)  # fmt: skip
    else:
        log.info("%s stopping: every record delivered", who)
    return left


def ensure_kafka_topics(pipe: PipelineConfig) -> None:
    """Create the pipeline's topics if missing (idempotent; a broker that does not auto-create
    topics would otherwise hold every record until it times out)."""
    ensure_topics(AdminClient(librdkafka_conf(pipe)), pipe)


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
    bridges: list[RankBridge] = []
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(serve_deliveries(sink))
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
                    dead = dead_letter_filer(sink, codec, pipe.topics.dead_letters, b.worker_id, ev)
                    tg.create_task(
                        bridge_rank(
                            b,
                            ctx,
                            ev,
                            rp,
                            cfg.events_topic,
                            emit,
                            cfg.replay_timeout_ms,
                            reject=dead,
                        )
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
                    cache_states=bridge_cache_states(bridges) if bridge else None,
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
