"""Dead letters: records a consumer cannot use go to ``dead-letters`` with a reason, and a counter.

Owns the ``DeadLetter`` record of one bad input (``dead_letter_record``: which reason code an
exception maps to, the raw bytes kept as read) and ``DeadLetters``, which encodes and produces them
and counts per reason code (the metric). Never drops input silently; never stops the consumer.

Must not: decide whether a record is bad (the decoders and the core do, by raising).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kvcompass.errors import InvalidInputError, UnknownWorkerError
from pipeline.codec import AvroCodec, DecodeError
from pipeline.producer import ProducerPort
from pipeline.rechunk import InvalidEvent

REASON_CODES = ("UNDECODABLE", "UNKNOWN_SCHEMA", "UNKNOWN_WORKER", "INVALID", "OVERSIZE", "OTHER")


def reason_code_of(exc: BaseException) -> str:
    """The ``DeadLetterReason`` symbol of an exception raised while handling a record."""
    if isinstance(exc, InvalidEvent):
        return exc.code
    if isinstance(exc, DecodeError):
        return exc.reason_code
    if isinstance(exc, UnknownWorkerError):
        return "UNKNOWN_WORKER"
    if isinstance(exc, InvalidInputError):
        return "INVALID"
    return "OTHER"


def dead_letter_record(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    raw: bytes | None,
    reason_code: str,
    reason: str,
    consumer: str,
    now_ms: int,
) -> dict[str, Any]:
    """The ``DeadLetter`` record (reason codes outside the enum become OTHER)."""
    return {
        "original_topic": topic,
        "original_partition": partition,
        "original_offset": offset,
        "original_key": key,
        "reason_code": reason_code if reason_code in REASON_CODES else "OTHER",
        "reason": reason,
        "consumer": consumer,
        "raw": raw or b"",
        "timestamp_ms": now_ms,
    }


class DeadLetters:
    """Files bad records on the dead-letter topic and counts them by reason code."""

    def __init__(self, producer: ProducerPort, codec: AvroCodec, topic: str, consumer: str) -> None:
        self.producer = producer
        self.codec = codec
        self.topic = topic
        self.consumer = consumer
        self.counts: Counter[str] = Counter()

    def file(
        self,
        *,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        raw: bytes | None,
        reason_code: str,
        reason: str,
        now_ms: int,
    ) -> dict[str, Any]:
        """Produce one dead letter; returns the record (for logs and tests)."""
        rec = dead_letter_record(
            topic=topic,
            partition=partition,
            offset=offset,
            key=key,
            raw=raw,
            reason_code=reason_code,
            reason=reason,
            consumer=self.consumer,
            now_ms=now_ms,
        )
        self.counts[rec["reason_code"]] += 1
        self.producer.produce(self.topic, self.codec.encode("DeadLetter", rec), topic.encode(), 0)
        return rec

    @property
    def total(self) -> int:
        return sum(self.counts.values())
