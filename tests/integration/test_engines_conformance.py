"""Conformance with the engines' own code: SGLang 0.5.23's and vLLM 0.33.0's KV-event publishers
(``ZmqEventPublisher``, their threads, PUB and replay ROUTER sockets) and SGLang's event recorder
(``KVCacheEventRecorder``) publish into the real bridge; what reaches ``kv-events`` on the real
broker is compared with prefix keys computed from the tokens the engine cached. SGLang's
``describe_kv_events_publisher`` builds the ``/server_info`` block that discovery reads, and the
emulated worker must advertise the same block for the same flags.

Stubs (only what needs a GPU, torch or a native extension): see ``engines.py``'s docstring — the
engines' package ``__init__`` files, SGLang's ``mem_cache.utils`` page-hash helpers (native hash)
and ``arg_groups.overrides`` (two functions), vLLM's ``ExternalBlockHash`` alias, and stand-ins
for SGLang's ``RadixKey``/``TreeNode``. Faults are injected by wrapping the publisher's PUB socket
(a dropped or corrupted send; the publisher's replay buffer keeps the good payload, as after a
real loss on the wire).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import json
import socket
import sys
import time
import uuid
from array import array
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import numpy as np
import pytest
import zmq
import zmq.asyncio
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kvcompass.deployment import Deployment, Region
from kvcompass.keys import KeyNamespace, prompt_key
from tests.integration.kv_holdings import holdings
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.producer import KafkaProducer
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics
from workers.bridge import Apply, RankBridge
from workers.bridge_zmq import bridge_rank
from workers.config import SidecarConfig
from workers.emulated.worker import EmulatedConfig, EmulatedWorker, kv_events_fields
from workers.protocol import decode_payload
from workers.sidecar import kv_emitter, make_bridges, parse_server_info

_spec = importlib.util.spec_from_file_location("engines", Path(__file__).with_name("engines.py"))
assert _spec is not None and _spec.loader is not None
eng = importlib.util.module_from_spec(_spec)
sys.modules["engines"] = eng
_spec.loader.exec_module(eng)
engines = eng.engines  # the module-scoped fixture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
MODEL = "conformance/model"
NS = KeyNamespace(MODEL)
DEP = Deployment("t", (Region("a", 2, 0.085),), ((0.0,),), block_size_tokens=4, n_levels=3,
                 same_region_min_tokens=8)  # fmt: skip


def _free_port_pair() -> int:
    """A base port b with b and b + 1 free (rank 1 of a DP publisher binds base + 1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = int(s.getsockname()[1])
        with contextlib.suppress(OSError), socket.socket() as s2:
            s2.bind(("127.0.0.1", p - 1))
            return p - 1
    raise RuntimeError("no free port pair")


def _wait_bindable(port: int) -> None:
    for _ in range(200):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZMQ binds
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"port {port} stayed in use")


class FaultyPub:
    """The publisher's PUB socket, with one send dropped or corrupted per listed sequence."""

    def __init__(self, sock: Any, plan: dict[int, str]) -> None:
        self._sock = sock
        self._plan = plan

    def send_multipart(self, frames: Any) -> Any:
        topic, seq8, payload = frames
        what = self._plan.pop(int.from_bytes(seq8, "big"), None)
        if what == "drop":
            return None
        if what == "corrupt":
            payload = b"\xc1" + bytes(payload[1:])  # 0xc1: never valid msgpack
        return self._sock.send_multipart((topic, seq8, payload))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _key(tokens: list[int], n: int) -> int:
    return prompt_key(NS, np.array(tokens[:n]), n)


def _consume(bootstrap: str, topic: str, n_min: int) -> list[dict[str, Any]]:
    codec = AvroCodec(InProcessRegistry())
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
    c.subscribe([topic])
    out: list[dict[str, Any]] = []
    idle = 0
    try:
        while idle < 10 and (len(out) < n_min or idle < 3):
            msg = c.poll(1.0)
            if msg is None:
                idle += 1
                continue
            if not msg.error():
                idle = 0
                out.append(codec.decode(msg.value() or b"")[1])
    finally:
        c.close()
    return out


async def _bridge(
    bridge: RankBridge, bootstrap: str, topic: str, pub: str, replay: str
) -> tuple[asyncio.Task[None], KafkaProducer, zmq.asyncio.Context]:
    sink = KafkaProducer(bootstrap)
    emit = kv_emitter(sink, AvroCodec(InProcessRegistry()), topic, bridge.worker_id)
    ctx = zmq.asyncio.Context()
    ready = asyncio.Event()
    task = asyncio.create_task(bridge_rank(bridge, ctx, pub, replay, "kv", emit, ready=ready))
    await asyncio.wait_for(ready.wait(), 10)
    await asyncio.sleep(0.5)  # the SUB subscription reaches the PUB (slow joiner)
    return task, sink, ctx


async def _until(cond: Any) -> None:
    for _ in range(400):
        if cond():
            return
        await asyncio.sleep(0.025)


async def _stop(task: asyncio.Task[None], sink: KafkaProducer, ctx: zmq.asyncio.Context) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert sink.flush(30) == 0
    ctx.term()


# -- SGLang ------------------------------------------------------------------------------------

P = list(range(100, 132))  # 8 pages of 4
Q = list(range(500, 517))  # EAGLE: 17 raw tokens = 16 bigrams = 4 pages of Q[:16]


async def _sglang_run(e: Any, bootstrap: str, topic: str) -> tuple[RankBridge, list[int]]:
    kv, ev = e.sglang_kv_events, e.sglang_events
    base, rbase = _free_port_pair(), _free_port_pair()
    side = SidecarConfig(worker_id=0, model=MODEL, page_size_tokens=4, dp_size=2,
                         events_endpoint=f"tcp://127.0.0.1:{base}",
                         replay_endpoint=f"tcp://127.0.0.1:{rbase}")  # fmt: skip
    bridge = make_bridges(side, DEP)[1]  # DP rank 1 = worker 1, ports base + 1
    pub_ep, rep_ep = side.events_endpoints()[1], side.replay_endpoints()[1]
    assert rep_ep is not None

    def publisher() -> Any:
        # A restarted publisher rebinds the ports its predecessor just closed; ZMQ releases a
        # closed socket's port in its I/O thread, a moment later.
        for port in (base + 1, rbase + 1):
            _wait_bindable(port)
        return kv.ZmqEventPublisher(1, f"tcp://127.0.0.1:{base}", f"tcp://127.0.0.1:{rbase}",
                                    topic="kv", bind=True)  # fmt: skip

    pub = publisher()
    pub._pub = FaultyPub(pub._pub, {1: "drop", 2: "corrupt"})
    task, sink, ctx = await _bridge(bridge, bootstrap, topic, pub_ep, rep_ep)
    rec = ev.KVCacheEventRecorder(enabled=True, page_size=4)
    root = eng.root()
    n1 = root.child(P[:16])
    n2 = n1.child(P[16:])
    eagle = root.child(Q, bigram=True)
    steps: list[Callable[[], object]] = [
        lambda: (rec.record_store(n1), rec.record_store(n2)),  # 0: one chain, coalesced
        lambda: (rec.record_store(n1, kv.StorageMedium.CPU), rec.record_remove(n1)),  # 1 dropped
        lambda: rec.record_store(eagle),  # 2: corrupted on the wire
        lambda: rec.record_remove(n2),  # 3
        lambda: rec.record_all_cleared(),  # 4
    ]
    for step in steps:
        step()
        pub.publish(kv.KVEventBatch(ts=time.time(), events=rec.take()))
    await _until(lambda: bridge.expected == len(steps))
    pub.shutdown()
    pub = publisher()  # the engine restarts: its sequence starts at 0 again
    await asyncio.sleep(0.5)  # our SUB reconnects
    rec.record_store(n1)
    pub.publish(kv.KVEventBatch(ts=time.time(), events=rec.take()))
    await _until(lambda: bridge.stats.engine_restarts == 1 and bridge.expected == 1)
    pub.shutdown()
    await _stop(task, sink, ctx)
    return bridge, [len(steps)]


def test_sglang_publisher_and_recorder__chains_tiers_eagle_gaps_restart_dp_rank(
    engines: Any, kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    topic = pipeline_config.topics.kv_events
    bridge, _ = asyncio.run(_sglang_run(engines, pipeline_config.bootstrap_servers, topic))
    s = bridge.stats
    assert (s.malformed, s.gaps_recovered, s.gaps_lost, s.engine_restarts) == (1, 1, 0, 1)
    assert not s.degraded and s.rejected_events == 0
    records = _consume(pipeline_config.bootstrap_servers, topic, n_min=8)
    assert {r["worker_id"] for r in records} == {1}
    ops = [r["op"] for r in records]
    stored = [r for r in records if r["op"] == "STORED"]
    assert stored[0]["registration_keys"] == [_key(P, n) for n in (8, 16, 32)]
    assert stored[0]["tier"] == "VRAM"
    moved = {k for r in records if r["op"] == "TIER_MOVED" and r["tier"] == "DRAM"
             for k in r["registration_keys"]}  # fmt: skip
    assert moved == {_key(P, 8), _key(P, 16)}
    assert stored[1]["registration_keys"] == [_key(Q, 8), _key(Q, 16)]  # EAGLE pairs
    removed = [r for r in records if r["op"] == "REMOVED"]
    assert [r["registration_keys"] for r in removed] == [[_key(P, 32)]]
    assert ops.count("CLEARED") == 3  # bridge start, AllBlocksCleared, engine restart
    cleared = [i for i, op in enumerate(ops) if op == "CLEARED"]
    before = records[: cleared[1]]  # up to SGLang's AllBlocksCleared
    assert holdings(before) == {_key(P, 8): "DRAM", _key(P, 16): "DRAM",
                                 _key(Q, 8): "VRAM", _key(Q, 16): "VRAM"}  # fmt: skip
    assert holdings(records) == {_key(P, 8): "VRAM", _key(P, 16): "VRAM"}
    assert len({r["engine_seq"] for r in records}) == len(records)


# -- vLLM --------------------------------------------------------------------------------------


def _vllm_hashes(tokens: list[int]) -> list[bytes]:
    """vLLM-style 32-byte chained block hashes (the bridge folds bytes to int64)."""
    out, prior = [], b""
    for i in range(0, len(tokens), 4):
        prior = hashlib.sha256(prior + repr(tokens[i : i + 4]).encode()).digest()
        out.append(prior)
    return out


async def _vllm_run(e: Any, bootstrap: str, topic: str, tmp: Path) -> RankBridge:
    kv = e.vllm_kv_events
    pub_ep, rep_ep = f"ipc://{tmp}/kv.sock", f"ipc://{tmp}/replay.sock"
    pub = kv.ZmqEventPublisher(0, pub_ep, rep_ep, topic="kv")
    pub._pub = FaultyPub(pub._pub, {1: "drop"})
    bridge = RankBridge(0, 0, NS, [8, 16, 32])
    task, sink, ctx = await _bridge(bridge, bootstrap, topic, pub_ep, rep_ep)
    h = _vllm_hashes(P)

    def stored(lo: int, hi: int, medium: str) -> Any:
        parent = h[lo - 1] if lo else None
        return kv.BlockStored(block_hashes=h[lo:hi], parent_block_hash=parent,
                              token_ids=P[lo * 4 : hi * 4], block_size=4, lora_id=None,
                              medium=medium, lora_name=None)  # fmt: skip

    batches = [
        [stored(0, 4, "GPU"), stored(4, 8, "GPU")],
        [stored(0, 2, "CPU"), kv.BlockRemoved(block_hashes=h[0:2], medium="GPU")],  # dropped
        [kv.BlockRemoved(block_hashes=h[4:8], medium="GPU")],
        [kv.AllBlocksCleared(), stored(0, 2, "GPU")],
    ]
    for events in batches:
        pub.publish(kv.KVEventBatch(ts=time.time(), events=events))
    await _until(lambda: bridge.expected == len(batches))
    pub.shutdown()
    await _stop(task, sink, ctx)
    return bridge


def test_vllm_publisher__bytes_hashes_cpu_medium_replayed_gap_clear(
    engines: Any, kafka_admin: AdminClient, pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    topic = pipeline_config.topics.kv_events
    bridge = asyncio.run(_vllm_run(engines, pipeline_config.bootstrap_servers, topic, tmp_path))
    s = bridge.stats
    assert (s.gaps_recovered, s.gaps_lost, s.malformed, s.rejected_events) == (1, 0, 0, 0)
    records = _consume(pipeline_config.bootstrap_servers, topic, n_min=5)
    first = next(r for r in records if r["op"] == "STORED")
    assert first["registration_keys"] == [_key(P, n) for n in (8, 16, 32)]
    moved = [r for r in records if r["op"] == "TIER_MOVED"]
    assert [(r["tier"], r["registration_keys"]) for r in moved] == [("DRAM", [_key(P, 8)])]
    assert [r["registration_keys"] for r in records if r["op"] == "REMOVED"] == [[_key(P, 32)]]
    assert holdings(records) == {_key(P, 8): "VRAM"}


# -- /server_info ------------------------------------------------------------------------------


def _server_args(kv_events_config: str, page_size: int, dp_size: int) -> SimpleNamespace:
    """The server args ``describe_kv_events_publisher`` reads (as resolved by SGLang)."""
    return SimpleNamespace(kv_events_config=kv_events_config, page_size=page_size, dcp_size=1,
                           dp_size=dp_size, attn_dp_size=1,
                           load_publish_endpoint=None)  # fmt: skip


def test_sglang_server_info_is_discovered__ports_base_plus_rank_wildcard_host(engines: Any) -> None:
    cfg = json.dumps({"publisher": "zmq", "endpoint": "tcp://*:6001",
                      "replay_endpoint": "tcp://*:6002", "topic": "kv"})  # fmt: skip
    args = _server_args(cfg, 16, 2)
    # build_server_info: server_args.resolved_dict() + kv_events; the HTTP route adds version
    info = {**vars(args), "kv_events": engines.sglang_runtime_context.describe_kv_events_publisher(
        args), "version": "0.5.23"}  # fmt: skip
    found = parse_server_info(info, "http://10.1.2.3:30000")
    assert (found.events_endpoint, found.replay_endpoint) == (
        "tcp://10.1.2.3:6001", "tcp://10.1.2.3:6002")  # fmt: skip
    assert (found.topic, found.page_size_tokens, found.dp_size) == ("kv", 16, 2)
    side = SidecarConfig(worker_id=0, events_endpoint=found.events_endpoint,
                         replay_endpoint=found.replay_endpoint, dp_size=found.dp_size)  # fmt: skip
    assert side.events_endpoints() == ["tcp://10.1.2.3:6001", "tcp://10.1.2.3:6002"]
    off = _server_args("", 16, 1)
    with pytest.raises(ValueError, match="--kv-events-config"):
        parse_server_info({**vars(off), "kv_events": None}, "http://h:1")


def test_emulated_worker_advertises_sglangs_block__same_flags_same_kv_events(
    engines: Any,
) -> None:
    base, rbase = _free_port_pair(), _free_port_pair()
    flag = json.dumps({"publisher": "zmq", "endpoint": f"tcp://127.0.0.1:{base}",
                       "replay_endpoint": f"tcp://127.0.0.1:{rbase}", "topic": "kv"})  # fmt: skip

    async def info() -> dict[str, Any]:
        cfg = EmulatedConfig(model=MODEL, port=0, page_size_tokens=16, **kv_events_fields(flag))
        async with EmulatedWorker(cfg) as w:
            return dict(w.info.as_json())

    got = asyncio.run(info())
    want = engines.sglang_runtime_context.describe_kv_events_publisher(_server_args(flag, 16, 1))
    assert got["kv_events"] == want
    assert json.loads(got["kv_events_config"])["endpoint"] == f"tcp://127.0.0.1:{base}"


def test_sglang_salted_store__cache_salt_kept_and_keyed_in_its_sharing_group(
    engines: Any,
) -> None:
    """SGLang 0.5.23's recorder on a node stored under ``cache_salt`` (what the edge sets to a
    tenant's sharing group): its ``BlockStored`` carries the salt, our decoder keeps it, and the
    sidecar's bridge keys the pages in that group's namespace, where the edge looks the group's
    requests up (``edge/isolation.py``)."""
    kv, ev = engines.sglang_kv_events, engines.sglang_events
    rec = ev.KVCacheEventRecorder(enabled=True, page_size=4)
    root = eng.root()
    node = eng.Node(eng.Key(array("q", P[:16]), cache_salt="acme"), root)
    root.children.append(node)
    rec.record_store(node)
    payload = msgspec.msgpack.Encoder().encode(kv.KVEventBatch(ts=1.0, events=rec.take()))
    batch = decode_payload(0, payload)
    assert [getattr(e, "cache_salt", None) for e in batch.events] == ["acme"]
    bridge = RankBridge(0, 0, NS, [8, 16])
    bridge.start(0)
    step = bridge.offer(batch)
    assert isinstance(step, Apply)
    (stored,) = [r for r in step.records if r["op"] == "STORED"]
    acme = KeyNamespace(MODEL, "", "acme")
    assert stored["sharing_group"] == "acme"
    want = [prompt_key(acme, np.array(P[:n]), n) for n in (8, 16)]
    assert stored["registration_keys"] == want
