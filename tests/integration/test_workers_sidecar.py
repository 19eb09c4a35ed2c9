"""Sidecar against an emulated worker: /server_info discovery gives the bound endpoints, the
load reporter turns /v1/loads into a QueueVector, and a migration record on a real broker
becomes exactly one prefill-only request whose cache event registers the replica."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import aiohttp
import numpy as np
import pytest
import zmq.asyncio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kvcompass.deployment import Deployment, Region
from kvcompass.keys import KeyNamespace, prompt_key
from wire.codec import AvroCodec, int64_key
from wire.config import PipelineConfig
from wire.producer import KafkaProducer, MemoryProducer
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics
from workers.bridge_zmq import bridge_rank
from workers.config import SidecarConfig
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker
from workers.load_reporter import LoadReporter
from workers.migration import MigrationExecutor
from workers.sidecar import apply_discovery, discover, kv_emitter, make_bridges, run_migrations

pytestmark = pytest.mark.integration
MODEL = "emulated/tiny"
DEP = Deployment("t", (Region("a", 2, 0.085),), ((0.0,),), block_size_tokens=4, n_levels=3,
                 same_region_min_tokens=8)  # fmt: skip
CODEC = AvroCodec(InProcessRegistry())


def _emulated(**kw: Any) -> EmulatedConfig:
    return EmulatedConfig(model=MODEL, port=0, page_size_tokens=4, vram_tokens=4096,
                          dram_tokens=0, events_endpoint="tcp://127.0.0.1:*",
                          replay_endpoint="tcp://127.0.0.1:*", **kw)  # fmt: skip


async def _discovery_and_load() -> tuple[Any, dict[str, Any] | None, list[Any]]:
    costs = EmulatedCosts(prefill_ms_per_token=0.5, time_scale=0.0)
    async with EmulatedWorker(_emulated(costs=costs)) as w, aiohttp.ClientSession() as http:
        side = apply_discovery(SidecarConfig(worker_id=1, engine_url=w.url), await discover(w.url))
        body = {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 0}}
        async with http.post(w.url + "/generate", json=body) as r:
            assert r.status == 200
        sink = MemoryProducer()
        rep = LoadReporter(0, [(1, w.url), (0, "http://127.0.0.1:9")], 0.085, 200, sink,
                           CODEC, "qv")  # fmt: skip
        rec = await rep.poll_once(http)
        return (side, w.info), rec, sink.of("qv")


def test_discovery_and_load_report__emulated_worker() -> None:
    (side, info), rec, sent = asyncio.run(_discovery_and_load())
    assert side.events_endpoint == info.events_endpoint and side.page_size_tokens == 4
    assert side.replay_endpoint == info.replay_endpoint and side.events_topic == "kv-events"
    assert rec is not None and rec["worker_ids"] == [1]  # the unreachable worker is left out
    assert rec["queue_ms"] == [0.0]  # nothing waiting
    ((key, value),) = sent
    assert key == (0).to_bytes(4, "big") and CODEC.decode(value)[1]["worker_ids"] == [1]


def _migration(rid: str, tokens: list[int]) -> dict[str, Any]:
    ns = KeyNamespace(MODEL)
    arr = np.array(tokens, dtype=np.int32)
    return {
        "request_id": rid, "model": MODEL, "prefix_tokens": arr.astype("<i4").tobytes(),
        "prefix_length_tokens": len(tokens), "prefix_key": prompt_key(ns, arr, len(tokens)),
        "first_level_key": prompt_key(ns, arr, 8), "source_worker_id": None,
        "target_worker_id": 0, "edge_region_id": 0, "mode": "CROSS_REGION_RECOMPUTE",
        "tier": "DRAM", "created_ms": 1,
    }  # fmt: skip


async def _migrate(pipe: PipelineConfig) -> tuple[MigrationExecutor, tuple[int, int]]:
    tokens = list(range(500, 532))
    async with EmulatedWorker(_emulated(costs=EmulatedCosts(time_scale=0.0))) as w:
        side = apply_discovery(
            SidecarConfig(worker_id=0, model=MODEL, engine_url=w.url), await discover(w.url)
        )
        (bridge,) = make_bridges(side, DEP)
        sink = KafkaProducer(pipe.bootstrap_servers)
        emit = kv_emitter(sink, CODEC, pipe.topics.kv_events, 0)
        for rid, target in (("m-1", 0), ("m-1", 0), ("m-2", 1)):  # duplicate; other worker
            rec = _migration(rid, tokens) | {"target_worker_id": target}
            sink.produce(pipe.topics.migrations, CODEC.encode("MigrationRequest", rec),
                         int64_key(rec["first_level_key"]))  # fmt: skip
        assert sink.flush(30) == 0
        ex = MigrationExecutor(0, w.url)
        ctx = zmq.asyncio.Context()
        ready = asyncio.Event()
        tasks = [
            asyncio.create_task(bridge_rank(bridge, ctx, side.events_endpoint,
                                            side.replay_endpoint, side.events_topic, emit,
                                            ready=ready)),
            asyncio.create_task(run_migrations(ex, pipe, CODEC, 30.0, offset_reset="earliest")),
        ]  # fmt: skip
        for _ in range(600):
            if ex.stats.duplicates + ex.stats.other_worker >= 2 and bridge.stats.batches >= 1:
                break
            await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        assert sink.flush(30) == 0
        ctx.term()
        return ex, w.engine.cache.match(tokens)


def test_migration_becomes_one_prefill_and_a_registration__real_broker(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    ex, held = asyncio.run(_migrate(pipeline_config))
    assert (ex.stats.accepted, ex.stats.done, ex.stats.duplicates, ex.stats.other_worker) == (
        1, 1, 1, 1)  # fmt: skip
    assert held == (32, 0)
    c = Consumer({"bootstrap.servers": pipeline_config.bootstrap_servers,
                  "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"})  # fmt: skip
    c.subscribe([pipeline_config.topics.kv_events])
    stored: list[dict[str, Any]] = []
    for _ in range(20):
        msg = c.poll(1.0)
        if msg is not None and not msg.error():
            rec = CODEC.decode(msg.value())[1]
            if rec["op"] == "STORED":
                stored.append(rec)
                break
    c.close()
    arr = np.arange(500, 532, dtype=np.int32)
    ns = KeyNamespace(MODEL)
    (rec,) = stored
    assert rec["registration_keys"] == [prompt_key(ns, arr, n) for n in (8, 16, 32)]
