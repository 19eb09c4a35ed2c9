"""Delivery: a failed record fails the waiters whose window holds it, and no later window."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from pipeline.delivery import Delivery, DeliveryError


class Msg:
    def __init__(self, topic: str, partition: int) -> None:
        self._tp = (topic, partition)

    def topic(self) -> str:
        return self._tp[0]

    def partition(self) -> int:
        return self._tp[1]


class ScriptedProducer:
    """Reports records as librdkafka would, in produce order; refuses values in ``refuse``."""

    def __init__(self, on_delivery: Any, refuse: set[bytes]) -> None:
        self.on_delivery = on_delivery
        self.refuse = refuse
        self.pending: list[tuple[str, int, bytes | None]] = []
        self.lock = threading.Lock()

    def produce(self, topic: str, value: bytes | None, key: bytes | None, partition: int) -> None:
        with self.lock:
            self.pending.append((topic, partition, value))

    def poll(self, timeout: float) -> int:
        with self.lock:
            todo, self.pending = self.pending, []
        for topic, partition, value in todo:
            err = "MSG_SIZE_TOO_LARGE" if value in self.refuse else None
            self.on_delivery(err, Msg(topic, partition))
        threading.Event().wait(timeout)
        return len(todo)

    def flush(self, timeout: float) -> int:
        return 0


def test_failure_fails_its_window_only__retry_succeeds() -> None:
    d = Delivery(lambda cb: ScriptedProducer(cb, {b"poison"}))

    async def run() -> None:
        start = d.mark()
        d.produce("dead", b"ok", None, 0)
        d.produce("dead", b"poison", None, 0)
        d.produce("ops", b"ok", None, 1)
        with pytest.raises(DeliveryError, match=r"dead\[0\]: MSG_SIZE_TOO_LARGE"):
            await d.delivered_up_to(d.mark(), since=start)
        again = d.mark()  # the retry of the batch, without the poison this time
        d.produce("dead", b"ok", None, 0)
        d.produce("ops", b"ok", None, 1)
        await d.delivered_up_to(d.mark(), since=again)

    try:
        asyncio.run(asyncio.wait_for(run(), 30))
    finally:
        d.close(5)
    assert d.failed_total == 1 and d.settled == {("dead", 0): 3, ("ops", 1): 2}
