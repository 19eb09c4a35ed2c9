"""Real ZMQ sockets, no broker: malformed frames are counted and skipped without stopping the
bridge; a gap older than the engine's replay buffer (older reply shape, without topic frame)
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


async def _malformed() -> tuple[RankBridge, list[dict[str, Any]]]:
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    bridge = RankBridge(0, 0, NS, [4, 8])
    records: list[dict[str, Any]] = []
    task = asyncio.create_task(
        bridge_rank(bridge, ctx, f"tcp://127.0.0.1:{port}", None, "kv", records.extend)
    )
    await asyncio.sleep(0.3)
    seq = [i.to_bytes(8, "big") for i in range(3)]
    enc = msgspec.msgpack.encode
    frames = [
        [b"kv", seq[0], enc([1.0, [_stored(1, None, [1, 2, 3, 4])], None])],
        [b"kv", b"only-two-frames"],
        [b"kv", b"\x00\x01", b"seq-not-8-bytes"],
        [b"kv", seq[1], b"\xc1\xc1"],  # not msgpack
        [b"kv", seq[2], enc([1.0, [_stored(2, 1, [5, 6, 7, 8])], None])],
    ]
    for f in frames:
        await pub.send_multipart(f)
    await _until(lambda: bridge.expected == 3)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    pub.close()
    ctx.term()
    return bridge, records


def test_malformed_frames_are_counted_and_skipped__bridge_keeps_going() -> None:
    bridge, records = asyncio.run(_malformed())
    assert bridge.stats.malformed == 3
    assert bridge.stats.gaps_lost == 0 and bridge.expected == 3
    assert [r["registration_lengths"] for r in records if r["op"] == "STORED"] == [[4], [8]]


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
