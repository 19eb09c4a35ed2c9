"""The one producer port every shell sends Kafka records through, and its three adapters.

Owns ``ProducerPort`` — the slice of ``confluent_kafka.Producer`` the project uses, so the real
producer (and ``pipeline.delivery.Delivery``, which wraps one) satisfies it as it is — and the
adapters chosen by the process that owns the broker connection:

* ``KafkaProducer``: an idempotent confluent-kafka producer (retries never duplicate or reorder
  a key) that waits out a full local queue instead of raising and counts delivery reports;
* ``MemoryProducer``: keeps every record in order (tests, dry runs); the in-memory adapter;
* ``NullProducer``: drops every record (an edge started without a broker: nothing would read
  them, so callers may skip building them, see ``edge.service``).

Lives in ``wire/`` because the edge, the workers' sidecar and the maintenance units all produce,
and no shell imports another (architecture §2). Must not: encode records (callers hand over wire
bytes from ``wire.codec`` / ``wire.patches``) or choose topics (``PipelineConfig.topics``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import KafkaError, Message, Producer

from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf

log = logging.getLogger(__name__)


class ProducerPort(Protocol):
    """Produce ``value`` (``None``: a tombstone) under ``key``; partition -1 = the key's hash."""

    def produce(
        self, topic: str, value: bytes | None = ..., key: bytes | None = ..., partition: int = ...
    ) -> None: ...

    def poll(self, timeout: float = ...) -> int: ...

    def flush(self, timeout: float = ...) -> int:
        """Wait up to ``timeout`` s for delivery; the number of records still undelivered."""
        ...


@dataclass(frozen=True, slots=True)
class Produced:
    """One record a ``MemoryProducer`` received."""

    topic: str
    value: bytes | None
    key: bytes | None
    partition: int


@dataclass
class MemoryProducer:
    """Keeps every produced record in order; ``flush`` has nothing to wait for."""

    records: list[Produced] = field(default_factory=list)

    def produce(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1
    ) -> None:
        self.records.append(Produced(topic, value, key, partition))

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 10.0) -> int:
        return 0

    def of(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        """``(key, value)`` of every record sent to ``topic``, in order."""
        return [(r.key, r.value) for r in self.records if r.topic == topic]


class NullProducer:
    """Drops every record (no broker configured); counts them so nothing vanishes unseen."""

    def __init__(self) -> None:
        self.dropped = 0

    def produce(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1
    ) -> None:
        self.dropped += 1

    def poll(self, timeout: float = 0.0) -> int:
        return 0

    def flush(self, timeout: float = 10.0) -> int:
        return 0


LINGER_MS = 5
"""The sidecars' and edges' ``linger.ms``: what an event may wait for companions before the wire
(bench/pipeline.py shows it in the ``kv_events`` hop)."""


class KafkaProducer:
    """Idempotent confluent-kafka producer; ``delivered`` / ``failed`` count delivery reports."""

    def __init__(self, broker: str | PipelineConfig, *, linger_ms: int = LINGER_MS) -> None:
        """``broker``: the config (address and security settings) or a bare address."""
        self._producer = Producer(
            librdkafka_conf(broker, {"enable.idempotence": True, "linger.ms": linger_ms})
        )
        self.delivered = 0
        self.failed = 0

    def _done(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            log.error("delivery to %s failed: %s", msg.topic(), err)

    def produce(
        self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1
    ) -> None:
        while True:
            try:
                # partition -1 is librdkafka's RD_KAFKA_PARTITION_UA: the partitioner decides
                self._producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=self._done
                )
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                self._producer.poll(0.1)
        self._producer.poll(0)

    def poll(self, timeout: float = 0.0) -> int:
        return int(self._producer.poll(timeout))

    def flush(self, timeout: float = 10.0) -> int:
        return int(self._producer.flush(timeout))
