"""Degraded workers are visible at the edge: queue-vector reports -> /health, explain, metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.app import assemble, build_app
from edge.cache_states import CacheStates
from edge.config import EdgeConfig
from edge.sync import QueueVectorFollower
from kvcompass.errors import InvalidInputError
from tests.unit.edge.test_handlers import DEP, MODEL
from wire.dead_letter import DeadLetters
from wire.producer import MemoryProducer


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


@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=60) | st.builds(
    lambda cut, flip: (cut, flip), st.integers(5, 60), st.integers(0, 480)), min_size=1,
    max_size=8))  # fmt: skip
def test_queue_vectors_are_applied_or_dead_lettered__random_and_mutated(cases: list[Any]) -> None:
    cfg = EdgeConfig.from_mapping({"region": "a", "model": MODEL, "loads_poll_period_ms": 0.0})
    edge = _EDGE.setdefault("e", assemble(cfg, DEP))
    sink = MemoryProducer()
    follower = QueueVectorFollower(edge, None, DeadLetters(sink, edge.service.codec, "dl", "e"))
    codec = edge.service.codec
    valid = codec.encode("QueueVector", _vector([1]))
    for i, case in enumerate(cases):
        if isinstance(case, tuple):  # a valid vector cut and with one bit flipped
            cut, flip = case
            b = bytearray(valid[:cut])
            b[flip % len(b)] ^= 1 << (flip % 8)
            value = bytes(b)
        else:
            value = case
        n0 = len(sink.of("dl"))
        applied = follower.handle(0, i, None, value)  # never raises
        filed = len(sink.of("dl")) - n0
        assert filed in (0, 1) and not (applied and filed)  # applied, or filed once, or ...
        if not applied and not filed:  # ... a valid vector skipped as stale
            assert _decodes(codec, value)
    letters = [codec.decode(v)[1] for _, v in sink.of("dl") if v is not None]
    assert all(d["reason"] and d["original_topic"] for d in letters)
    assert edge.cache_states.unknown() in ([], [1])


_EDGE: dict[str, Any] = {}


def _decodes(codec: Any, value: bytes) -> bool:
    try:
        codec.decode(value)
    except Exception:
        return False
    return True
