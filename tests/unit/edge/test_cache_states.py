"""Degraded workers are visible at the edge: queue-vector reports -> /health, explain, metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from edge.app import assemble, build_app
from edge.cache_states import CacheStates
from edge.config import EdgeConfig
from edge.sync import QueueVectorFollower
from kvcompass.errors import InvalidInputError
from pipeline.dead_letter import DeadLetters
from pipeline.producer import MemoryProducer
from tests.unit.edge.test_handlers import DEP, MODEL


def test_a_sidecar_speaks_only_for_the_workers_it_bridges__two_sidecars() -> None:
    s = CacheStates()
    assert s.report([0, 1], [1], 4, 10.0) == [1]
    assert s.report([2], [], 4, 11.0) == []  # another sidecar: says nothing of worker 1
    assert s.unknown() == [1] and s.unknown_since_ms == {1: 10.0}
    assert s.report([0, 1], [1], 4, 12.0) == []  # still unknown, not a new report
    assert s.report([0, 1], [], 4, 13.0) == [] and s.unknown() == []  # re-learned
    assert s.reports == 1
    with pytest.raises(InvalidInputError, match="subset"):
        s.report([0], [3], 4, 14.0)
    with pytest.raises(InvalidInputError, match="bridged_worker_ids"):
        s.report([9], [], 4, 14.0)


def _vector(unknown: list[int]) -> dict[str, Any]:
    return {"region_id": 1, "worker_ids": [1], "queue_ms": [5.0], "seq": 1, "timestamp_ms": 1,
            "bridged_worker_ids": [1], "cache_unknown_worker_ids": unknown}  # fmt: skip


def test_degraded_worker_shows_in_health_and_metrics_until_relearned__queue_vector() -> None:
    cfg = EdgeConfig.from_mapping({"region": "a", "model": MODEL, "loads_poll_period_ms": 0.0})
    edge = assemble(cfg, DEP)
    sink = MemoryProducer()
    dead = DeadLetters(sink, edge.service.codec, "dl", "edge-a")
    follower = QueueVectorFollower(edge, None, dead)
    codec = edge.service.codec

    async def run() -> list[Any]:
        client = TestClient(TestServer(build_app(edge)))
        await client.start_server()
        try:
            seen = [await (await client.get("/health")).json()]
            follower.handle(0, 0, None, codec.encode("QueueVector", _vector([1])))
            seen.append(await (await client.get("/health")).json())
            seen.append(await (await client.get("/metrics")).text())
            vec = {**_vector([1]), "seq": 2, "cache_unknown_worker_ids": [], "queue_ms": [1.0]}
            follower.handle(0, 1, None, codec.encode("QueueVector", vec))
            seen.append(await (await client.get("/health")).json())
            bad = {**_vector([0]), "seq": 3}  # not bridged by that sidecar: dead letter
            follower.handle(0, 2, None, codec.encode("QueueVector", bad))
            return seen
        finally:
            await client.close()

    before, degraded, metrics, after = asyncio.run(run())
    assert (before["status"], before["cache_unknown_workers"]) == ("ok", [])
    assert (degraded["status"], degraded["cache_unknown_workers"]) == ("degraded", [1])
    assert 'kvc_edge_cache_unknown_total{worker="1"} 1' in metrics
    assert 'kvc_edge_cache_unknown{worker="1"} 1' in metrics
    assert (after["status"], after["cache_unknown_workers"]) == ("ok", [])
    letters = [codec.decode(v)[1] for _, v in sink.of("dl") if v is not None]
    assert [d["original_offset"] for d in letters] == [2] and "subset" in letters[0]["reason"]
