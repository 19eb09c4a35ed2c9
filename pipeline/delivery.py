"""Awaitable delivery of what the worker produced: at-least-once without blocking the event loop.

Owns a confluent-kafka producer shared by the agents, a background thread that serves its
delivery reports, and per-partition counters: every record is produced to an explicit partition,
and a partition's delivery reports arrive in produce order (idempotent producer), so the n-th
report of (topic, partition) is about its n-th record. An agent takes ``start = mark()`` before
its batch and ``await``s ``delivered_up_to(mark(), since=start)`` before taking its next batch,
i.e. before Faust may commit the offsets of the batch's inputs; other agents run meanwhile.

A record the broker refuses (``MSG_SIZE_TOO_LARGE``, a deleted topic, ...) makes every waiter
whose window [since, target) holds it raise ``DeliveryError``; later windows are not affected, so
the caller may retry its batch (``pipeline.progress``) and succeeds once the cause is gone.

Must not: decide what to produce.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque
from typing import Any

from kvcompass.errors import KVCompassError

TopicPartitionKey = tuple[str, int]
_KEEP_FAILURES = 1024
"""Failures remembered per partition (older ones cannot be in a window still waited for)."""


class DeliveryError(KVCompassError):
    """The producer reported a record it could not deliver."""


class Delivery:
    """Wraps a producer (``ProducerPort`` itself) and tracks delivery per partition."""

    def __init__(self, make_producer: Any) -> None:
        self.produced: Counter[TopicPartitionKey] = Counter()
        self.settled: Counter[TopicPartitionKey] = Counter()
        """Reports received, delivered or failed, per partition."""
        self.failures: dict[TopicPartitionKey, deque[tuple[int, str]]] = {}
        """(ordinal of the failed record in its partition, error), recent ones."""
        self.failed_total = 0
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._settled_lock = threading.Lock()
        self._waiters: list[tuple[_Window, asyncio.Future[None]]] = []
        self.producer = make_producer(self._on_delivery)
        self._running = True
        self._thread = threading.Thread(target=self._serve, name="kvc-delivery", daemon=True)
        self._thread.start()

    def _on_delivery(self, err: Any, msg: Any) -> None:
        tp = (msg.topic(), msg.partition())
        with self._settled_lock:  # flush() may serve reports on another thread
            if err is not None:
                q = self.failures.setdefault(tp, deque(maxlen=_KEEP_FAILURES))
                q.append((self.settled[tp], f"{tp[0]}[{tp[1]}]: {err}"))
                self.failed_total += 1
            self.settled[tp] += 1

    def _check(self, w: _Window) -> tuple[bool, str | None]:
        """(settled, first error in the window)."""
        with self._settled_lock:
            for tp, end in w.target.items():
                start = w.since.get(tp, 0)
                for ordinal, error in self.failures.get(tp, ()):
                    if start <= ordinal < end:
                        return True, error
            return all(self.settled[tp] >= n for tp, n in w.target.items()), None

    def _serve(self) -> None:
        while self._running:
            self.producer.poll(0.02)
            with self._lock:
                waiters, self._waiters = self._waiters, []
            keep = []
            for w, fut in waiters:
                done, error = self._check(w)
                if error is not None:
                    fut.get_loop().call_soon_threadsafe(_fail, fut, error)
                elif done:
                    fut.get_loop().call_soon_threadsafe(_done, fut)
                else:
                    keep.append((w, fut))
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

    def produce_partition(
        self, topic: str, partition: int, keys: list[bytes], values: list[bytes | None]
    ) -> None:
        """``produce`` of many records to one partition, counted once (one lock, not one per
        record: the patch path produces ~7 records per event)."""
        produce = self.producer.produce
        with self._count_lock:
            for key, value in zip(keys, values, strict=True):
                try:
                    produce(topic, value, key, partition)
                except BufferError:  # librdkafka's queue is full: let it drain, then again
                    self.producer.poll(0.05)
                    produce(topic, value, key, partition)
            self.produced[(topic, partition)] += len(keys)

    def poll(self, timeout: float = 0) -> int:
        if timeout > 0:
            threading.Event().wait(timeout)  # the serving thread polls; just give it time
        return 0

    def flush(self, timeout: float = 30.0) -> int:
        return int(self.producer.flush(timeout))

    # -- waiting ----------------------------------------------------------------------------
    def mark(self) -> dict[TopicPartitionKey, int]:
        """What has been produced so far, per partition."""
        with self._count_lock:
            return dict(self.produced)

    async def delivered_up_to(
        self,
        target: dict[TopicPartitionKey, int],
        since: dict[TopicPartitionKey, int] | None = None,
    ) -> None:
        """Return once every record produced before ``mark()`` returned ``target`` is settled;
        raise ``DeliveryError`` if one produced after ``since`` (a mark; None: the start) failed.
        """
        w = _Window(target, since or {})
        done, error = self._check(w)
        if error is not None:
            raise DeliveryError(error)
        if done:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._waiters.append((w, fut))
        await fut

    def window_state(self, target: dict[TopicPartitionKey, int],
                since: dict[TopicPartitionKey, int]) -> tuple[bool, str | None]:  # fmt: skip
        """(every record in [since, target) settled, the first failure among them): the
        blocking callers' check after a ``flush`` (``Checkpointer.write_now``)."""
        return self._check(_Window(target, since))

    def close(self, timeout: float = 30.0) -> None:
        self._running = False
        self._thread.join(timeout)
        self.producer.flush(timeout)


class _Window:
    __slots__ = ("since", "target")

    def __init__(
        self, target: dict[TopicPartitionKey, int], since: dict[TopicPartitionKey, int]
    ) -> None:
        self.target = target
        self.since = since


def _done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _fail(fut: asyncio.Future[None], error: str) -> None:
    if not fut.done():
        fut.set_exception(DeliveryError(error))
