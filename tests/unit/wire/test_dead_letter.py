"""Dead letters: exceptions map to reason codes; records encode and are counted."""

from __future__ import annotations

import pytest

from kvcompass.errors import InvalidInputError, UnknownWorkerError
from kvcompass.rechunk import InvalidEvent
from wire.codec import AvroCodec, DecodeError, UnknownSchemaIdError
from wire.dead_letter import DeadLetters, reason_code_of
from wire.producer import MemoryProducer
from wire.registry import InProcessRegistry


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (DecodeError("x"), "UNDECODABLE"),
        (UnknownSchemaIdError("x"), "UNKNOWN_SCHEMA"),
        (InvalidEvent("x", "OVERSIZE"), "OVERSIZE"),
        (UnknownWorkerError("x"), "UNKNOWN_WORKER"),
        (InvalidInputError("x"), "INVALID"),
        (RuntimeError("x"), "OTHER"),
    ],
)
def test_reason_code_of_maps_exception_classes__each_class(exc: Exception, code: str) -> None:
    assert reason_code_of(exc) == code


def test_file_produces_a_decodable_dead_letter_and_counts__bad_bytes() -> None:
    codec = AvroCodec(InProcessRegistry(), validate=True)
    fake = MemoryProducer()
    dl = DeadLetters(fake, codec, "dead", "rechunk")
    dl.file(topic="kv", partition=2, offset=9, key=b"k", raw=b"junk", reason_code="UNDECODABLE",
            reason="bad magic", now_ms=5)  # fmt: skip
    dl.file(topic="kv", partition=2, offset=10, key=None, raw=None, reason_code="WEIRD",
            reason="?", now_ms=6)  # fmt: skip
    assert dl.counts == {"UNDECODABLE": 1, "OTHER": 1} and dl.total == 2
    first = fake.records[0]
    name, rec = codec.decode(first.value or b"")
    assert (first.topic, first.key, first.partition, name) == ("dead", b"kv", 0, "DeadLetter")
    assert (rec["original_offset"], rec["raw"], rec["consumer"]) == (9, b"junk", "rechunk")


def test_dead_letter_is_bounded_with_length_and_hash__one_megabyte_value() -> None:
    import hashlib

    codec = AvroCodec(InProcessRegistry(), validate=True)
    fake = MemoryProducer()
    dl = DeadLetters(fake, codec, "dead", "pipeline", max_raw_bytes=1000)
    value = bytes(range(256)) * 3906  # 999,936 bytes of garbage
    dl.file(topic="kv", partition=0, offset=3, key=b"K" * 5000, raw=value,
            reason_code="UNDECODABLE", reason="x" * 100_000, now_ms=1)  # fmt: skip
    encoded = fake.records[0].value or b""
    assert len(encoded) < 8000
    rec = codec.decode(encoded)[1]
    assert rec["raw"] == value[:1000] and rec["raw_size_bytes"] == len(value)
    assert rec["raw_sha256"] == hashlib.sha256(value).digest()
    assert rec["original_key"] == b"K" * 1000 and rec["original_key_size_bytes"] == 5000
    assert len(rec["reason"]) == 4096 and rec["reason"].endswith("(100000 characters)")


def test_version_1_dead_letters_still_read__schema_id_7() -> None:
    import io
    import struct

    from fastavro import schemaless_writer

    registry = InProcessRegistry()
    codec = AvroCodec(registry)
    v1 = registry.resolve(7).writer
    old = {"original_topic": "kv", "original_partition": 1, "original_offset": 2,
           "original_key": None, "reason_code": "INVALID", "reason": "r", "consumer": "c",
           "raw": b"abc", "timestamp_ms": 3}  # fmt: skip
    body = io.BytesIO()
    schemaless_writer(body, v1, old)
    name, rec = codec.decode(b"\x00" + struct.pack(">I", 7) + body.getvalue())
    assert name == "DeadLetter" and rec["raw"] == b"abc"
    assert (rec["raw_size_bytes"], rec["raw_sha256"], rec["original_key_size_bytes"]) == (
        -1,
        None,
        -1,
    )


def test_failed_produce_is_not_counted__broker_refuses() -> None:
    class Refusing(MemoryProducer):
        def produce(self, *a: object, **k: object) -> None:
            raise BufferError("queue full")

    dl = DeadLetters(Refusing(), AvroCodec(InProcessRegistry()), "dead", "pipeline")
    with pytest.raises(BufferError):
        dl.file(topic="kv", partition=0, offset=1, key=None, raw=b"x", reason_code="INVALID",
                reason="r", now_ms=1)  # fmt: skip
    assert dl.total == 0
