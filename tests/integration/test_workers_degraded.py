"""A sidecar restarted after more engine batches than the replay buffer holds: degraded, seen.

Real emulated worker (HTTP + ZMQ PUB + replay ROUTER, ``buffer_steps`` = 4 as SGLang's
``--kv-events-config``), real sidecar loops (``run_sidecar``: bridge + load reporter) writing to
the in-memory producer, and the edge's real queue-vector follower and HTTP app reading what they
wrote. The restarted sidecar cannot replay the batches it missed: it publishes CLEARED, reports
the worker's cache unknown in its queue vectors, the edge's ``/health`` says ``degraded`` and
lists the worker; after enough clean batches the sidecar re-learns and the edge says ``ok``.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from edge.app import assemble, build_app
from edge.config import EdgeConfig
from edge.sync import QueueVectorFollower
from tests.integration.test_workers_sidecar import CODEC, DEP, MODEL, _emulated
from wire.config import PipelineConfig
from wire.dead_letter import DeadLetters
from wire.producer import MemoryProducer
from workers.config import SidecarConfig
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedWorker
from workers.sidecar import apply_discovery, discover, run_sidecar

pytestmark = pytest.mark.integration
PIPE = PipelineConfig(topic_prefix="deg.")
TRIES = 600  # x 0.05 s: how long a failing test waits


async def _until(pred: Any, what: str) -> None:
    for _ in range(TRIES):
        if pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _vectors(sink: MemoryProducer) -> list[dict[str, Any]]:
    return [CODEC.decode(v)[1] for _, v in sink.of(PIPE.topics.queue_vectors) if v is not None]


def _ops(sink: MemoryProducer) -> list[str]:
    return [CODEC.decode(v)[1]["op"] for _, v in sink.of(PIPE.topics.kv_events) if v is not None]


def _states(sink: MemoryProducer) -> list[str]:
    return [CODEC.decode(v)[1]["cache_state"] for _, v in sink.of(PIPE.topics.kv_events)
            if v is not None]  # fmt: skip


async def _scenario() -> dict[str, Any]:
    costs = EmulatedCosts(time_scale=0.0)
    out: dict[str, Any] = {}
    async with EmulatedWorker(_emulated(costs=costs, replay_buffer_steps=4)) as w, \
            aiohttp.ClientSession() as http:  # fmt: skip
        side = apply_discovery(SidecarConfig(worker_id=1, engine_url=w.url, model=MODEL,
                                             page_size_tokens=4, load_period_ms=50),
                               await discover(w.url))  # fmt: skip
        sink = MemoryProducer()
        prompt = iter(range(1000, 10**6, 64))

        async def send(n: int) -> None:
            for _ in range(n):
                start = next(prompt)
                body = {"input_ids": list(range(start, start + 16)),
                        "sampling_params": {"max_new_tokens": 0}}  # fmt: skip
                async with http.post(w.url + "/generate", json=body) as r:
                    assert r.status == 200

        def sidecar() -> asyncio.Task[None]:
            return asyncio.create_task(run_sidecar(side, PIPE, DEP, sink, CODEC, migrate=False))

        first = sidecar()
        await _until(lambda: any(v["bridged_worker_ids"] == [1] for v in _vectors(sink)),
                     "the first sidecar's queue vector")  # fmt: skip
        await send(3)
        await _until(lambda: _ops(sink).count("STORED") >= 3, "the first sidecar's stores")
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await send(6)  # 6 batches the buffer of 4 cannot all replay
        n_vectors, n_ops = len(_vectors(sink)), len(_ops(sink))
        second = sidecar()
        await _until(lambda: any(v["cache_unknown_worker_ids"] == [1]
                                 for v in _vectors(sink)[n_vectors:]),
                     "the restarted sidecar to report the cache unknown")  # fmt: skip
        out["ops_after_restart"] = _ops(sink)[n_ops:]
        out["states_after_restart"] = _states(sink)[n_ops:]
        out["degraded_vector"] = next(v for v in _vectors(sink)[n_vectors:]
                                      if v["cache_unknown_worker_ids"])  # fmt: skip
        await send(70)  # clean batches (fresh prompts): the bridge re-learns after 64
        n_now = len(_vectors(sink))
        await _until(lambda: any(v["cache_unknown_worker_ids"] == [] and v["bridged_worker_ids"]
                                 for v in _vectors(sink)[n_now:]),
                     "the sidecar to re-learn")  # fmt: skip
        out["last_state"] = _states(sink)[-1]
        out["relearned_vector"] = next(v for v in _vectors(sink)[n_now:]
                                       if not v["cache_unknown_worker_ids"])  # fmt: skip
        second.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await second
    # the edge of region a (the worker's own) folds the vectors in as its follower would
    edge = assemble(EdgeConfig(region="a", model=MODEL, loads_poll_period_ms=0.0), DEP)
    follower = QueueVectorFollower(edge, None, DeadLetters(MemoryProducer(), CODEC, "dl", "e"))
    client = TestClient(TestServer(build_app(edge)))
    await client.start_server()
    try:
        for i, key in enumerate(("degraded_vector", "relearned_vector")):
            follower.handle(0, i, None, CODEC.encode("QueueVector", out[key]))
            out[key + "_health"] = await (await client.get("/health")).json()
    finally:
        await client.close()
    out["cache_unknown_total"] = edge.service.metrics.get("cache_unknown_total", worker=1)
    return out


def test_restart_beyond_the_replay_buffer_is_degraded_everywhere_until_relearned() -> None:
    out = asyncio.run(_scenario())
    assert out["ops_after_restart"][:2] == ["CLEARED", "CLEARED"]  # start, then the lost gap
    # kv-events say it too: the lost gap's CLEARED and what follows carry UNKNOWN, until re-learned
    assert out["states_after_restart"][:2] == ["KNOWN", "UNKNOWN"]
    assert out["last_state"] == "KNOWN"
    degraded = out["degraded_vector_health"]
    assert (degraded["status"], degraded["cache_unknown_workers"]) == ("degraded", [1])
    assert out["cache_unknown_total"] == 1
    ok = out["relearned_vector_health"]
    assert (ok["status"], ok["cache_unknown_workers"]) == ("ok", [])
