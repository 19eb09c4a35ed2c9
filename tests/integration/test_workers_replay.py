"""Real ZMQ sockets, no broker: a malformed frame is asked from the replay socket (a good copy is
applied; with no replay the gap is lost and the worker degraded) without stopping the bridge; a
gap older than the engine's replay buffer (older reply shape, without topic frame)
publishes CLEARED, degrades the worker, and the worker re-learns from later stores."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import aiohttp
import msgspec
import pytest
import zmq
import zmq.asyncio

from kvcompass.keys import KeyNamespace
from workers.bridge import RankBridge
from workers.bridge_zmq import bridge_rank
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = pytest.mark.integration
NS = KeyNamespace("emulated/tiny")


async def _until(cond: Any, tries: int = 200) -> None:
    for _ in range(tries):
        if cond():
            return
        await asyncio.sleep(0.02)


def _stored(h: int, parent: int | None, toks: list[int]) -> dict[str, Any]:
    return {"type": "BlockStored", "block_hashes": [h], "parent_block_hash": parent,
            "token_ids": toks, "block_size": 4, "lora_id": None, "medium": "GPU"}  # fmt: skip


async def _serve_replay(sock: zmq.asyncio.Socket, buffer: dict[int, bytes]) -> None:
    """The engines' replay ROUTER (SGLang 0.5.23 reply shape), holding good copies."""
    while True:
        ident, _, start = await sock.recv_multipart()
        for seq in sorted(buffer):
            if seq >= int.from_bytes(start, "big"):
                await sock.send_multipart([ident, b"", b"kv", seq.to_bytes(8, "big"), buffer[seq]])
        await sock.send_multipart([ident, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])


async def _malformed(with_replay: bool) -> tuple[RankBridge, list[dict[str, Any]]]:
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    router = ctx.socket(zmq.ROUTER)
    rport = router.bind_to_random_port("tcp://127.0.0.1")
    enc = msgspec.msgpack.encode
    good = [enc([1.0, [_stored(1, None, [1, 2, 3, 4])], None]),
            enc([1.0, [_stored(2, 1, [5, 6, 7, 8])], None]),
            enc([1.0, [["AllBlocksCleared"]], None])]  # fmt: skip
    held: dict[int, bytes] = {}  # what the engine published so far (its replay buffer)
    server = asyncio.create_task(_serve_replay(router, held))
    bridge = RankBridge(0, 0, NS, [4, 8])
    records: list[dict[str, Any]] = []
    replay = f"tcp://127.0.0.1:{rport}" if with_replay else None
    task = asyncio.create_task(
        bridge_rank(bridge, ctx, f"tcp://127.0.0.1:{port}", replay, "kv", records.extend)
    )
    await asyncio.sleep(0.3)
    seq = [i.to_bytes(8, "big") for i in range(3)]
    frames = [
        [b"kv", seq[0], good[0]],
        [b"kv", b"only-two-frames"],
        [b"kv", b"\x00\x01", b"seq-not-8-bytes"],
        [b"kv", seq[1], b"\xc1\xc1"],  # not msgpack; the replay socket holds a good copy
        [b"kv", seq[2], good[2]],
    ]
    for f in frames:
        if len(f) == 3 and len(f[1]) == 8:
            n = int.from_bytes(f[1], "big")
            held[n] = good[n]
        await pub.send_multipart(f)
    await _until(lambda: bridge.expected == 3)
    for t in (task, server):
        t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await t
    pub.close()
    router.close()
    ctx.term()
    return bridge, records


def test_malformed_frame_is_replayed__good_copy_applied_not_degraded() -> None:
    bridge, records = asyncio.run(_malformed(with_replay=True))
    assert bridge.stats.malformed == 3 and bridge.expected == 3
    assert bridge.stats.gaps_lost == 0 and not bridge.stats.degraded
    assert [r["registration_lengths"] for r in records if r["op"] == "STORED"] == [[4], [8]]


def test_malformed_frame_without_replay_is_a_lost_gap__degraded_bridge_keeps_going() -> None:
    bridge, records = asyncio.run(_malformed(with_replay=False))
    assert bridge.stats.malformed == 3 and bridge.expected == 3
    assert bridge.stats.gaps_lost == 1 and bridge.stats.degraded
    assert [r["registration_lengths"] for r in records if r["op"] == "STORED"] == [[4]]


async def _lost_gap() -> tuple[RankBridge, list[dict[str, Any]]]:
    cfg = EmulatedConfig(
        model=NS.model_id, port=0, page_size_tokens=4, vram_tokens=1024, dram_tokens=0,
        events_endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*",
        replay_buffer_steps=1, replay_topic_frame=False, costs=EmulatedCosts(time_scale=0.0),
    )  # fmt: skip
    records: list[dict[str, Any]] = []
    async with EmulatedWorker(cfg) as w, aiohttp.ClientSession() as http:
        ctx = zmq.asyncio.Context()
        bridge = RankBridge(0, 0, NS, [8, 16], relearn_batches=2)
        pub, rep = w.info.events_endpoint, w.info.replay_endpoint
        task = asyncio.create_task(bridge_rank(bridge, ctx, pub, rep, "kv-events", records.extend))
        await asyncio.sleep(0.3)

        async def send(ids: list[int]) -> None:
            body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}}
            async with http.post(w.url + "/generate", json=body) as r:
                assert r.status == 200

        await send(list(range(8)))  # seq 0, seen
        w.publisher.drop_next(2)
        await send(list(range(8)) + list(range(100, 108)))  # seq 1, lost (buffer keeps 1)
        await send(list(range(200, 216)))  # seq 2, dropped; replay only has this one
        await send(list(range(300, 316)))  # seq 3: gap 1..2, buffer starts at 2 -> lost
        await _until(lambda: bridge.expected == 4)
        degraded_after_loss = bridge.stats.degraded
        await send(list(range(200, 216)) + list(range(400, 404)))  # below a lost page: orphan
        await _until(lambda: bridge.expected == 5)
        orphans = bridge.table.stats.orphan_blocks
        await send(list(range(500, 516)))  # two clean batches: re-learned
        await send(list(range(600, 616)))
        await _until(lambda: bridge.expected == 7)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        ctx.term()
    assert degraded_after_loss and orphans == 1
    return bridge, records


def test_gap_older_than_buffer_clears_and_degrades__older_reply_shape() -> None:
    bridge, records = asyncio.run(_lost_gap())
    ops = [r["op"] for r in records]
    assert ops.count("CLEARED") == 2  # start, then the lost gap
    assert bridge.stats.gaps_lost == 1
    after = ops[ops.index("CLEARED", 1) :]
    assert "STORED" in after
    assert not bridge.stats.degraded  # re-learned from stores after the loss
