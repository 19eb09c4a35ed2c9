"""Reading records of the pipeline's topics: ``Raw`` (one consumed record, as the agents hand it
over) and ``read_partition`` (a bounded read of one partition: recovery's checkpoint, patches and
``index-ops`` tail). Must not: decode or decide anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf


@dataclass(frozen=True, slots=True)
class Raw:
    """One consumed record, as the agents hand it over."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = -1
    """The record's Kafka timestamp (its producer's CreateTime), ms; -1 when unknown."""


def read_partition(
    broker: str | PipelineConfig,
    topic: str,
    partition: int,
    stop: int | None = None,
    timeout_s: float = 60.0,
    start: int = 0,
) -> list[Raw]:
    """Records of one partition from ``start`` (or its log start, if later) up to ``stop``
    (exclusive; None: the end now)."""
    c = Consumer(
        librdkafka_conf(
            broker,
            {
                "group.id": "kvcompass-recovery",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
            },
        )
    )
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        end = high if stop is None else min(stop, high)
        out: list[Raw] = []
        if end <= max(low, start):
            return out
        c.assign([TopicPartition(topic, partition, start if start > low else OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in c.consume(10_000, 0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    raise RuntimeError(f"reading {topic}[{partition}]: {err}")
                off = int(m.offset() or 0)
                if off >= end:
                    return out
                out.append(Raw(topic, partition, off, m.key(), m.value()))
                if off == end - 1:
                    return out
        raise TimeoutError(f"reading {topic}[{partition}] up to {end} took over {timeout_s} s")
    finally:
        c.close()
