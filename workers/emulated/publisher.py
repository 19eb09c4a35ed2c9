"""The emulated worker's KV-event publisher: ZMQ PUB plus a replay ROUTER, as SGLang runs them.

Owns the sequence counter (from 0, +1 per batch), the replay buffer (the last ``buffer_steps``
batches), and the reply layout (``workers.protocol`` documents both). Runs on the server's
asyncio loop: ``publish`` sends at once (PUB never blocks; a slow subscriber loses messages at
its high-water mark, which is what replay is for); ``serve_replay`` answers replay requests.
Must not: decide what the events are (``cache``).

Fault injection for tests: ``drop_next(n)`` keeps the next n batches in the replay buffer but
does not send them on PUB, which is how a subscriber sees a sequence gap.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

import zmq
import zmq.asyncio

from workers.protocol import END_SEQ, Event, encode_payload, encode_seq

log = logging.getLogger(__name__)


class EventPublisher:
    def __init__(
        self,
        ctx: zmq.asyncio.Context,
        endpoint: str,
        replay_endpoint: str | None,
        topic: str,
        *,
        dp_rank: int = 0,
        buffer_steps: int = 10_000,
        replay_topic_frame: bool = True,
    ) -> None:
        self.topic = topic.encode()
        self.dp_rank = dp_rank
        self.replay_topic_frame = replay_topic_frame
        self._pub = ctx.socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.setsockopt(zmq.SNDHWM, 100_000)
        self._pub.bind(endpoint)
        self.endpoint = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        self._replay: zmq.asyncio.Socket | None = None
        self.replay_endpoint: str | None = None
        if replay_endpoint is not None:
            self._replay = ctx.socket(zmq.ROUTER)
            self._replay.setsockopt(zmq.LINGER, 0)
            self._replay.bind(replay_endpoint)
            self.replay_endpoint = self._replay.getsockopt_string(zmq.LAST_ENDPOINT)
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=buffer_steps)
        self._seq = 0
        self._drop = 0

    @property
    def next_seq(self) -> int:
        return self._seq

    def drop_next(self, n: int) -> None:
        self._drop += n

    async def publish(self, events: Sequence[Event]) -> int:
        """Publish one batch; its sequence number."""
        seq = self._seq
        self._seq += 1
        payload = encode_payload(events, self.dp_rank)
        self._buffer.append((seq, payload))
        if self._drop > 0:
            self._drop -= 1
        else:
            await self._pub.send_multipart([self.topic, encode_seq(seq), payload])
        return seq

    async def serve_replay(self) -> None:
        """Answer replay requests until cancelled."""
        if self._replay is None:
            return
        sock = self._replay
        while True:
            frames = await sock.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                log.warning("replay: ignoring a request of %d frames", len(frames))
                continue
            ident, _, start_raw = frames
            start = int.from_bytes(start_raw, "big", signed=True)
            head = [ident, b""] + ([self.topic] if self.replay_topic_frame else [])
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await sock.send_multipart([*head, encode_seq(seq), payload])
            await sock.send_multipart([*head, encode_seq(END_SEQ), b""])

    def close(self) -> None:
        self._pub.close()
        if self._replay is not None:
            self._replay.close()
