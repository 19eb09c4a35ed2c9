"""The rechunk stage's consumer: ``kv-events`` taken in batches by librdkafka, not record by record.

Why not a Faust agent: ``kv-events`` carries one small record per worker event, and Faust's
consumer path (aiokafka's fetch, a ``Message`` and an ``Event`` per record, the conductor, the
stream's queue, an ack per record) costs about 83 µs of CPU per record here with an agent that
does nothing at all (``bench/faust_floor.py``), 1.7x the whole per-event budget of one worker
process (50 µs: 20,000 events/s per process). librdkafka's batched ``consume`` hands over the same
records for a few µs each (``bench/README.md``, "Pipeline"). ``index-ops`` carries one record per
take and shard, hundreds of events each, so the maintenance stage stays a Faust agent
(``pipeline.agents``: one actor per partition, the sole writer of its shard).

Owns ``RechunkConsumer``: a confluent-kafka consumer in the group ``<app id>-rechunk``, subscribed
to ``kv-events`` (Kafka's group assignment spreads the partitions over the worker processes, as it
did for the Faust agent), that takes up to ``take_max`` records within ``take_within_s``, hands
them to ``PipelineShell.rechunk_until_done`` and commits their offsets only once the take's output
is delivered (at-least-once, as before: a take that was not delivered is read again). It runs as a
task of the worker's Faust app (``pipeline.agents``), on its event loop; ``consume`` runs in a
thread. Must not: decode or decide anything (the shell does).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Protocol

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from pipeline.progress import Hold, StepAbandoned
from pipeline.reads import Raw
from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 5
"""librdkafka's ``fetch.wait.max.ms``: how long the broker may hold a fetch with nothing to send.
Its default (500 ms) put up to half a second on an event arriving on an idle partition; 5 ms keeps
the hop near the take window while an idle worker's fetches stay a few hundred per second."""


def rechunk_group(app_id: str) -> str:
    """The consumer group of the rechunk stage of the worker app ``app_id`` (its ``kv-events``
    offsets; the app's own group holds the maintenance agent's ``index-ops`` offsets)."""
    return f"{app_id}-rechunk"


class RechunkShell(Protocol):
    hold: Hold

    async def rechunk_until_done(self, batch: list[Raw]) -> int: ...


def consumer_conf(config: PipelineConfig, group_id: str) -> dict[str, Any]:
    return librdkafka_conf(config, {
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": FETCH_WAIT_MS,
        "fetch.min.bytes": 1,
        # a killed worker's partitions move after this (the Faust agent had the same)
        "session.timeout.ms": 10_000,
        "heartbeat.interval.ms": 1_000,
    })  # fmt: skip


def to_raw(m: Any) -> Raw:
    """A consumed librdkafka message as the shell takes it (Kafka timestamp in ms, or -1)."""
    kind, ts = m.timestamp()
    return Raw(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
               -1 if kind == TIMESTAMP_NOT_AVAILABLE else int(ts))  # fmt: skip


class RechunkConsumer:
    """``kv-events`` -> ``shell.rechunk_until_done``, a take at a time, committed when done."""

    def __init__(self, shell: RechunkShell, config: PipelineConfig, group_id: str,
                 take_max: int, take_within_s: float, consumer: Any = None) -> None:  # fmt: skip
        self.shell = shell
        self.topic = config.topics.kv_events
        self.take_max = take_max
        self.take_within_s = take_within_s
        self.consumer = consumer or Consumer(consumer_conf(config, group_id))
        self.errors = 0
        self.takes = 0
        self._using = threading.Lock()
        """Held by a take (in its thread) and by ``_close``: a task cancelled while its take is
        still in ``consume`` closes the consumer only once that call returned."""

    def _take(self) -> list[Any]:
        """Up to ``take_max`` records: wait at most ``take_within_s`` for the first, then take
        what has been fetched already without waiting. At a low rate an event goes on at once
        (a fixed window would hold every one for it); at a high rate the records that arrived
        while the last take was processed make the batch."""
        with self._using:
            first = self.consumer.consume(1, self.take_within_s)
            if not first or self.take_max == 1:
                return list(first)
            return [*first, *self.consumer.consume(self.take_max - 1, 0)]

    async def run(self) -> None:
        """Until the shell stops (or the task is cancelled): take, hand over, commit."""
        self.consumer.subscribe([self.topic])
        try:
            while not self.shell.hold.stopping:
                try:
                    msgs = await asyncio.to_thread(self._take)
                except KafkaException as exc:  # broker gone: the loop waits, never dies
                    self._error(str(exc))
                    await asyncio.sleep(1.0)
                    continue
                raws: list[Raw] = []
                ends: dict[int, int] = {}
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            self._error(str(err))
                        continue
                    raws.append(to_raw(m))
                    ends[m.partition()] = m.offset() + 1
                if not raws:
                    continue
                try:
                    await self.shell.rechunk_until_done(raws)
                except StepAbandoned:  # stopping while held: not delivered, not committed
                    break
                self.takes += 1
                self._commit(ends)
        finally:
            self._close()

    def _commit(self, ends: dict[int, int]) -> None:
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(ends.items())]
        try:
            self.consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:  # e.g. revoked meanwhile: the new owner re-reads (harmless)
            self._error(f"commit: {exc}")

    def _error(self, what: str) -> None:
        self.errors += 1
        if self.errors <= 3 or self.errors % 100 == 0:
            log.warning("kv-events consumer: %s (%d errors so far)", what, self.errors)

    def _close(self) -> None:
        try:
            with self._using:  # a take cut short by cancellation ends within take_within_s
                self.consumer.close()  # leaves the group: the partitions move at once
        except (KafkaException, RuntimeError) as exc:
            log.warning("kv-events consumer: close: %s", exc)
