"""The engine side of the event count: what each worker's engine published vs what reached Kafka.

Owns ``check_engines``: for every worker, ask its engine's replay socket for every batch it has
published since it started (SGLang's ZMQ replay ``ROUTER``, found through ``/server_info`` as
the sidecar finds it), turn them into records with a fresh bridge built as the sidecar builds it
(``workers.sidecar.make_bridges``), and compare the cache those records say the worker holds
(registration key → tier) with the one its records in ``kv-events`` say. Equal means nothing the
engine published was lost between the engine and Kafka, across sidecar crashes and restarts
(a restarted sidecar publishes CLEARED and replays from the engine's first batch). When the
engine's buffer no longer starts at its first batch the worker cannot be compared and is counted
as such (never as a pass of the comparison). Must not change anything: it reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import zmq.asyncio

from kvcompass.deployment import Deployment
from pipeline.replay import read_kafka
from wire.codec import AvroCodec
from wire.registry import InProcessRegistry
from workers.bridge_zmq import request_replay
from workers.config import SidecarConfig
from workers.sidecar import apply_discovery, make_bridges, parse_server_info

CODEC = AvroCodec(InProcessRegistry())


def holdings(records: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """Key → tier after ``records`` in order (CLEARED empties, REMOVED drops, others set)."""
    held: dict[int, str] = {}
    for r in records:
        if r["op"] == "CLEARED":
            held.clear()
        for k in r.get("registration_keys") or []:
            if r["op"] == "REMOVED":
                held.pop(k, None)
            else:
                held[k] = str(r["tier"])
    return held


@dataclass(frozen=True, slots=True)
class EngineCheck:
    """Per worker: (keys the engine's batches imply, keys ``kv-events`` implies, differing)."""

    per_worker: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    batches: int = 0
    """Batches the engines' replay buffers returned, all workers."""
    incomplete: tuple[int, ...] = ()
    """Workers whose engine buffer no longer starts at its first batch (not compared)."""

    @property
    def differing(self) -> int:
        return sum(d for _, _, d in self.per_worker.values())

    @property
    def ok(self) -> bool:
        return self.differing == 0

    def line(self) -> str:
        keys = sum(e for e, _, _ in self.per_worker.values())
        out = (f"engines: {len(self.per_worker)} workers' published batches ({self.batches:,}) "
               f"imply {keys:,} held keys, {self.differing} differ from kv-events")  # fmt: skip
        if self.incomplete:
            out += f"; not comparable (replay buffer wrapped): workers {list(self.incomplete)}"
        return out


def _published(
    engine_url: str, info: Mapping[str, Any], worker: int, dep: Deployment, model: str
) -> tuple[dict[int, str], int, bool]:
    found = parse_server_info(info, engine_url)
    if found.replay_endpoint is None:
        raise ValueError(f"worker {worker}: its engine offers no replay endpoint")
    cfg = apply_discovery(SidecarConfig(worker_id=worker, model=model), found)
    bridge = make_bridges(cfg, dep)[0]

    async def replay() -> list[Any]:
        ctx = zmq.asyncio.Context()
        try:
            assert found.replay_endpoint is not None
            return await request_replay(ctx, found.replay_endpoint, 0, 10_000)
        finally:
            ctx.term()

    batches = asyncio.run(replay())
    complete = not batches or batches[0].seq == 0
    now = int(time.time() * 1000)
    held = holdings([*bridge.start(now), *bridge.on_replay(0, batches, now)])
    return held, len(batches), complete


def check_engines(
    bootstrap: str,
    kv_events_topic: str,
    dep: Deployment,
    model: str,
    engine_urls: Mapping[int, str],
    server_info: Mapping[int, Mapping[str, Any]],
    timeout_s: float = 60.0,
) -> EngineCheck:
    """Compare every worker of ``engine_urls`` (their ``/server_info`` bodies given)."""
    by_worker: dict[int, list[dict[str, Any]]] = {w: [] for w in engine_urls}
    for rec in read_kafka(bootstrap, kv_events_topic, timeout_s=timeout_s):
        try:
            _, ev = CODEC.decode(rec.value or b"")
        except (ValueError, KeyError):
            continue  # dead-lettered by the pipeline, not a worker's state
        w = ev.get("worker_id")
        if w in by_worker:
            by_worker[w].append(ev)
    per: dict[int, tuple[int, int, int]] = {}
    incomplete: list[int] = []
    total = 0
    for w, url in sorted(engine_urls.items()):
        engine, n, complete = _published(url, server_info[w], w, dep, model)
        total += n
        if not complete:
            incomplete.append(w)
            continue
        kafka = holdings(by_worker[w])
        differ = sum(1 for k in engine.keys() | kafka.keys() if engine.get(k) != kafka.get(k))
        per[w] = (len(engine), len(kafka), differ)
    return EngineCheck(per, total, tuple(incomplete))
