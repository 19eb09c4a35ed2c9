"""Dead letters: exceptions map to reason codes; records encode and are counted."""

from __future__ import annotations

import pytest

from kvcompass.errors import InvalidInputError, UnknownWorkerError
from pipeline.codec import AvroCodec, DecodeError, UnknownSchemaIdError
from pipeline.dead_letter import DeadLetters, reason_code_of
from pipeline.rechunk import InvalidEvent
from pipeline.registry import InProcessRegistry
from tests.unit.pipeline.test_patch_sink import FakeProducer


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
    fake = FakeProducer()
    dl = DeadLetters(fake, codec, "dead", "rechunk")
    dl.file(topic="kv", partition=2, offset=9, key=b"k", raw=b"junk", reason_code="UNDECODABLE",
            reason="bad magic", now_ms=5)  # fmt: skip
    dl.file(topic="kv", partition=2, offset=10, key=None, raw=None, reason_code="WEIRD",
            reason="?", now_ms=6)  # fmt: skip
    assert dl.counts == {"UNDECODABLE": 1, "OTHER": 1} and dl.total == 2
    topic, value, key, part = fake.sent[0]
    name, rec = codec.decode(value)  # type: ignore[arg-type]
    assert (topic, key, part, name) == ("dead", b"kv", 0, "DeadLetter")
    assert (rec["original_offset"], rec["raw"], rec["consumer"]) == (9, b"junk", "rechunk")
