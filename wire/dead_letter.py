"""Dead letters: records a consumer cannot use go to ``dead-letters`` with a reason, and a counter.

Owns the ``DeadLetter`` record of one bad input (``dead_letter_record``: which reason code an
exception maps to, the raw bytes kept as read up to a bound) and ``DeadLetters``, which encodes
and produces them and counts per reason code (the metric). Never drops input silently.

A dead letter is **bounded** (schema id 9): value and key are cut to ``max_raw_bytes`` and the
reason to ``MAX_REASON_CHARS``, with the whole value's length and SHA-256 kept, so a dead letter
always fits in a Kafka record however large the record it describes (a 1 MB garbage record once
made its own dead letter ``MSG_SIZE_TOO_LARGE``). If producing one still fails, the exception
reaches the caller: the take is then held, not acknowledged (``pipeline.progress``).

Must not: decide whether a record is bad (the decoders and the core do, by raising).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from kvcompass.errors import InvalidInputError, UnknownWorkerError
from kvcompass.rechunk import InvalidEvent
from wire.codec import AvroCodec, DecodeError
from wire.producer import ProducerPort

REASON_CODES = ("UNDECODABLE", "UNKNOWN_SCHEMA", "UNKNOWN_WORKER", "INVALID", "OVERSIZE", "OTHER")
MAX_REASON_CHARS = 4096
DEFAULT_MAX_RAW_BYTES = 64 * 1024
"""Bytes of the original value (and key) a dead letter keeps: enough to read what went wrong,
far below any broker's ``max.message.bytes``."""


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


def _cut_reason(reason: str) -> str:
    if len(reason) <= MAX_REASON_CHARS:
        return reason
    tail = f"... ({len(reason)} characters)"
    return reason[: MAX_REASON_CHARS - len(tail)] + tail


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
    max_raw_bytes: int = DEFAULT_MAX_RAW_BYTES,
) -> dict[str, Any]:
    """The ``DeadLetter`` record (reason codes outside the enum become OTHER), bounded."""
    value = raw or b""
    return {
        "original_topic": topic[:MAX_REASON_CHARS],
        "original_partition": partition,
        "original_offset": offset,
        "original_key": None if key is None else key[:max_raw_bytes],
        "reason_code": reason_code if reason_code in REASON_CODES else "OTHER",
        "reason": _cut_reason(reason),
        "consumer": consumer,
        "raw": value[:max_raw_bytes],
        "timestamp_ms": now_ms,
        "raw_size_bytes": len(value),
        "raw_sha256": None if raw is None else hashlib.sha256(raw).digest(),
        "original_key_size_bytes": -1 if key is None else len(key),
    }


class DeadLetters:
    """Files bad records on the dead-letter topic and counts them by reason code."""

    def __init__(
        self,
        producer: ProducerPort,
        codec: AvroCodec,
        topic: str,
        consumer: str,
        max_raw_bytes: int = DEFAULT_MAX_RAW_BYTES,
    ) -> None:
        if max_raw_bytes < 0:
            raise InvalidInputError(f"max_raw_bytes: expected >= 0; got {max_raw_bytes}")
        self.producer = producer
        self.codec = codec
        self.topic = topic
        self.consumer = consumer
        self.max_raw_bytes = max_raw_bytes
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
        """Produce one dead letter; returns the record (for logs and tests).

        Counted only once produced: a failure raises to the caller, which must not go past it.
        """
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
            max_raw_bytes=self.max_raw_bytes,
        )
        value = self.codec.encode("DeadLetter", rec)
        self.producer.produce(self.topic, value, topic.encode()[: self.max_raw_bytes], 0)
        self.counts[rec["reason_code"]] += 1
        return rec

    @property
    def total(self) -> int:
        return sum(self.counts.values())
