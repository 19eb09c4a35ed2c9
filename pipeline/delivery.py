"""Awaitable delivery of what the worker produced: at-least-once without blocking the event loop.

Owns a confluent-kafka producer shared by the agents, a background thread that serves its
delivery reports, and per-partition counters: every record is produced to an explicit partition,
and a partition's records are delivered in order (idempotent producer), so "delivered count of
(topic, partition) >= the produced count at the end of my batch" means every record of the batch
reached the broker. An agent ``await``s ``delivered(mark())`` before taking its next batch, i.e.
before Faust may commit the offsets of the batch's inputs; other agents run meanwhile. A delivery
error is fatal (``DeliveryError`` is raised to every waiter): the worker stops and, restarted,
rebuilds from its input topics.

Must not: decide what to produce.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

from kvcompass.errors import KVCompassError

TopicPartitionKey = tuple[str, int]


class DeliveryError(KVCompassError):
    """The producer reported a record it could not deliver."""


class Delivery:
    """Wraps a producer (``ProducerPort`` itself) and tracks delivery per partition."""

    def __init__(self, make_producer: Any) -> None:
        self.produced: Counter[TopicPartitionKey] = Counter()
        self.delivered: Counter[TopicPartitionKey] = Counter()
        self.error: str | None = None
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._delivered_lock = threading.Lock()
        self._waiters: list[tuple[dict[TopicPartitionKey, int], asyncio.Future[None]]] = []
        self.producer = make_producer(self._on_delivery)
        self._running = True
        self._thread = threading.Thread(target=self._serve, name="kvc-delivery", daemon=True)
        self._thread.start()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.error = f"{msg.topic()}[{msg.partition()}]: {err}"
            return
        with self._delivered_lock:  # flush() may serve reports on another thread
            self.delivered[(msg.topic(), msg.partition())] += 1

    def _serve(self) -> None:
        while self._running:
            self.producer.poll(0.02)
            with self._lock:
                waiters, self._waiters = self._waiters, []
            keep = []
            for target, fut in waiters:
                if self.error is not None:
                    fut.get_loop().call_soon_threadsafe(_fail, fut, self.error)
                elif all(self.delivered[tp] >= n for tp, n in target.items()):
                    fut.get_loop().call_soon_threadsafe(_done, fut)
                else:
                    keep.append((target, fut))
            if keep:
                with self._lock:
                    self._waiters.extend(keep)

    # -- ProducerPort ---------------------------------------------------------------------
    def produce(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1
    ) -> None:
        with self._count_lock:  # recovery produces from an executor thread
            self.producer.produce(topic, value, key, partition)
            self.produced[(topic, partition)] += 1

    def poll(self, timeout: float = 0) -> int:
        if timeout > 0:
            threading.Event().wait(timeout)  # the serving thread polls; just give it time
        return 0

    def flush(self, timeout: float = 30.0) -> int:
        return int(self.producer.flush(timeout))

    # -- waiting ----------------------------------------------------------------------------
    def mark(self) -> dict[TopicPartitionKey, int]:
        """What has been produced so far, per partition."""
        return dict(self.produced)

    async def delivered_up_to(self, target: dict[TopicPartitionKey, int]) -> None:
        """Return once everything produced before ``mark()`` returned ``target`` is delivered."""
        if self.error is not None:
            raise DeliveryError(self.error)
        if all(self.delivered[tp] >= n for tp, n in target.items()):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.append((target, fut))
        await fut

    def close(self, timeout: float = 30.0) -> None:
        self._running = False
        self._thread.join(timeout)
        self.producer.flush(timeout)


def _done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _fail(fut: asyncio.Future[None], error: str) -> None:
    if not fut.done():
        fut.set_exception(DeliveryError(error))
