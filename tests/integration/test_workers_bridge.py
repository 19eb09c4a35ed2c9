"""Bridge + emulated SGLang worker + real broker: shared-prefix requests become registrations,
tier moves and evictions in kv-events that match the worker's cache exactly; a forced sequence
gap is recovered through replay (malformed frames: test_workers_replay.py)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import aiohttp
import numpy as np
import pytest
import zmq
import zmq.asyncio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kvcompass.deployment import Deployment, Region
from kvcompass.keys import KeyNamespace, prompt_key
from kvcompass.types import Tier
from tests.integration.kv_holdings import holdings
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.producer import KafkaProducer
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics
from workers.bridge_zmq import bridge_rank
from workers.config import SidecarConfig
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker
from workers.sidecar import apply_discovery, discover, kv_emitter, make_bridges

pytestmark = pytest.mark.integration

MODEL = "emulated/tiny"
DEP = Deployment("t", (Region("a", 2, 0.085),), ((0.0,),), block_size_tokens=4, n_levels=3,
                 same_region_min_tokens=8)  # fmt: skip
LENGTHS = (8, 16, 32)
NS = KeyNamespace(MODEL)


def _consume_all(bootstrap: str, topic: str, expected_min: int) -> list[dict[str, Any]]:
    codec = AvroCodec(InProcessRegistry())
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    out: list[dict[str, Any]] = []
    idle = 0
    try:
        while idle < 10 and (len(out) < expected_min or idle < 3):
            msg = c.poll(1.0)
            if msg is None:
                idle += 1
                continue
            if msg.error():
                continue
            idle = 0
            assert msg.key() == (0).to_bytes(4, "big")
            out.append(codec.decode(msg.value())[1])
    finally:
        c.close()
    return out


def _truth(worker: EmulatedWorker, prompts: list[list[int]]) -> dict[int, str]:
    """Every registration key the worker's cache truly holds, with the tier of its last page."""
    cache = worker.engine.cache
    held: dict[int, str] = {}
    for p in prompts:
        for n in LENGTHS:
            if n > len(p):
                continue
            path = cache._walk(cache._pages(p[:n]), None)
            if len(path) * cache.page_size >= n:
                held[prompt_key(NS, np.array(p), n)] = path[n // cache.page_size - 1].tier.name
    return held


async def _scenario(bootstrap: str, topic: str) -> tuple[dict[str, Any], list[list[int]], Any]:
    cfg = EmulatedConfig(
        model=MODEL, port=0, page_size_tokens=4, vram_tokens=24, dram_tokens=16,
        events_endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*",
        costs=EmulatedCosts(time_scale=0.0),
    )  # fmt: skip
    async with EmulatedWorker(cfg) as worker, aiohttp.ClientSession() as http:
        side = apply_discovery(
            SidecarConfig(worker_id=0, model=MODEL, engine_url=worker.url),
            await discover(worker.url),
        )
        (bridge,) = make_bridges(side, DEP)
        sink = KafkaProducer(bootstrap)
        emit = kv_emitter(sink, AvroCodec(InProcessRegistry()), topic, 0)
        ctx = zmq.asyncio.Context()
        ready = asyncio.Event()
        task = asyncio.create_task(
            bridge_rank(bridge, ctx, side.events_endpoint, side.replay_endpoint,
                        side.events_topic, emit, ready=ready)
        )  # fmt: skip
        await asyncio.wait_for(ready.wait(), 10)
        await asyncio.sleep(0.3)  # SUB subscription propagates (slow joiner); a miss is a gap

        async def send(ids: list[int]) -> dict[str, Any]:
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}}
            async with http.post(worker.url + "/generate", json=body) as r:
                return dict((await r.json())["meta_info"])

        base = list(range(1000, 1016))
        prompts = [[*base, 1, 2, 3, 4], base[:8] + list(range(50, 62)), base + [7] * 12,
                   list(range(2000, 2032)), [*base, 1, 2, 3, 4]]  # fmt: skip
        metas = [await send(p) for p in prompts[:3]]
        worker.publisher.drop_next(1)  # this request's batch never reaches the SUB socket
        metas.append(await send(prompts[3]))
        metas.append(await send(prompts[4]))
        for _ in range(100):
            if bridge.expected == worker.publisher.next_seq:
                break
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert sink.flush(30) == 0
        ctx.term()
        return (
            {"metas": metas, "stats": bridge.stats, "truth": _truth(worker, prompts)},
            prompts,
            bridge,
        )


def test_requests_become_registrations_moves_and_evictions__gap_replayed(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    topic = pipeline_config.topics.kv_events
    out, prompts, _bridge = asyncio.run(_scenario(pipeline_config.bootstrap_servers, topic))
    metas, stats = out["metas"], out["stats"]
    assert metas[0]["cached_tokens"] == 0
    assert metas[1]["cached_tokens"] == 8 and metas[1]["cached_tokens_details"]["device"] == 8
    assert metas[4]["cached_tokens"] > 0
    assert stats.gaps_recovered == 1 and stats.gaps_lost == 0 and not stats.degraded

    records = _consume_all(pipeline_config.bootstrap_servers, topic, expected_min=6)
    ops = [r["op"] for r in records]
    assert ops[0] == "CLEARED"
    assert {"STORED", "TIER_MOVED", "REMOVED"} <= set(ops)
    first = next(r for r in records if r["op"] == "STORED")
    assert first["registration_lengths"] == [8, 16]
    assert first["registration_keys"] == [prompt_key(NS, np.array(prompts[0]), n) for n in (8, 16)]
    assert first["tier"] == Tier.VRAM.name
    assert any(r["op"] == "TIER_MOVED" and r["tier"] == "DRAM" for r in records)
    assert holdings(records) == out["truth"]
    assert len({r["engine_seq"] for r in records}) == len(records)
