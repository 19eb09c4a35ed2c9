"""Where sidecar records go: a Kafka producer, or a list in memory (tests, dry runs).

Owns the ``RecordSink`` port and its two adapters. Must not: encode records (callers hand over
wire bytes from ``pipeline.codec.AvroCodec``) or choose topics (``PipelineConfig.topics``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    def send(self, topic: str, key: bytes, value: bytes) -> None: ...

    def flush(self, timeout_s: float = 10.0) -> int:
        """Wait for delivery; the number of records still undelivered."""
        ...


@dataclass
class MemorySink:
    """Keeps ``(topic, key, value)`` in order; the in-memory adapter."""

    records: list[tuple[str, bytes, bytes]] = field(default_factory=list)

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.records.append((topic, key, value))

    def flush(self, timeout_s: float = 10.0) -> int:
        return 0

    def of(self, topic: str) -> list[tuple[bytes, bytes]]:
        return [(k, v) for t, k, v in self.records if t == topic]


class KafkaSink:
    """confluent-kafka producer; idempotent, so retries never duplicate or reorder a key."""

    def __init__(self, bootstrap_servers: str, *, linger_ms: int = 5) -> None:
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap_servers,
                "enable.idempotence": True,
                "linger.ms": linger_ms,
            }
        )
        self.delivered = 0
        self.failed = 0

    def _done(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.failed += 1
            log.error("delivery to %s failed: %s", msg.topic(), err)

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._done)
                break
            except BufferError:  # local queue full: serve callbacks, then retry
                self._producer.poll(0.1)
        self._producer.poll(0)

    def flush(self, timeout_s: float = 10.0) -> int:
        return int(self._producer.flush(timeout_s))
