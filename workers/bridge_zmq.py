"""The bridge's asyncio shell: one DP rank's SUB socket and replay DEALER around ``RankBridge``.

Owns the sockets and the loop: subscribe, publish CLEARED, replay from 0, then follow the live
stream, asking the engine's ROUTER for a replay on every gap (``workers.protocol`` documents the
frames). Must not: decide anything (``workers.bridge.RankBridge`` does) or encode Avro (``emit``
is handed in by ``workers.sidecar``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import zmq
import zmq.asyncio

from workers.bridge import Apply, NeedReplay, RankBridge
from workers.protocol import (
    Batch,
    ProtocolError,
    Rejected,
    decode_pub,
    decode_replay,
    encode_seq,
)

log = logging.getLogger(__name__)

Emit = Callable[[list[dict[str, Any]]], None]
Reject = Callable[[int, Rejected], None]
"""Files one undecodable event (batch seq, the event) on the dead-letter topic."""


async def request_replay(
    ctx: zmq.asyncio.Context, endpoint: str, from_seq: int, timeout_ms: int
) -> list[Batch]:
    """Ask the engine's ROUTER for every buffered batch from ``from_seq``. Malformed replies are
    skipped (the caller sees a hole); a silent engine raises ``TimeoutError``."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    out: list[Batch] = []
    try:
        await sock.send_multipart([b"", encode_seq(from_seq)])
        while True:
            if not await sock.poll(timeout_ms):
                raise TimeoutError(f"replay from {endpoint}: no reply within {timeout_ms} ms")
            frames = await sock.recv_multipart()
            try:
                batch = decode_replay(frames)
            except ProtocolError as exc:
                log.warning("replay from %s: skipping malformed reply: %s", endpoint, exc)
                continue
            if batch is None:
                return out
            out.append(batch)
    finally:
        sock.close()


async def bridge_rank(
    bridge: RankBridge,
    ctx: zmq.asyncio.Context,
    events_endpoint: str,
    replay_endpoint: str | None,
    topic: str,
    emit: Emit,
    replay_timeout_ms: int = 2_000,
    ready: asyncio.Event | None = None,
    reject: Reject | None = None,
) -> None:
    """Run one rank until cancelled: subscribe, CLEARED, replay from 0, then follow live.
    Undecodable events go to ``reject`` (logged when it is None), applied records to ``emit``."""

    def send(records: list[dict[str, Any]]) -> None:
        emit(records)
        for seq, rej in bridge.take_rejected():
            if reject is None:
                log.warning("worker %d: undecodable event: %s", bridge.worker_id, rej.reason)
            else:
                reject(seq, rej)

    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
    sub.connect(events_endpoint)

    async def replay(from_seq: int) -> None:
        now_ms = int(time.time() * 1000)
        if replay_endpoint is None:
            send(bridge.on_replay(from_seq, [], now_ms))
            return
        try:
            batches = await request_replay(ctx, replay_endpoint, from_seq, replay_timeout_ms)
        except TimeoutError as exc:
            log.warning("worker %d: %s", bridge.worker_id, exc)
            batches = []
        send(bridge.on_replay(from_seq, batches, now_ms))

    try:
        send(bridge.start(int(time.time() * 1000)))
        if replay_endpoint is not None:
            await replay(0)
        if ready is not None:
            ready.set()
        while True:
            frames = await sub.recv_multipart()
            try:
                batch = decode_pub(frames)
            except ProtocolError as exc:
                seq = None
                if len(frames) == 3 and len(frames[1]) == 8:
                    seq = int.from_bytes(frames[1], "big", signed=True)
                log.warning(
                    "worker %d: malformed frame (seq %s), asking replay: %s",
                    bridge.worker_id,
                    seq,
                    exc,
                )
                need = bridge.malformed(seq)
                if need is not None:
                    await replay(need.from_seq)
                continue
            step = bridge.offer(batch)
            if isinstance(step, NeedReplay):
                await replay(step.from_seq)
                step = bridge.offer(batch)
                if isinstance(step, NeedReplay):  # the replay left a hole: the gap is lost
                    send(bridge.on_replay(step.from_seq, [], int(time.time() * 1000)))
                    bridge.expected = None
                    step = bridge.offer(batch)
            if isinstance(step, Apply):
                send(step.records)
    finally:
        sub.close()
