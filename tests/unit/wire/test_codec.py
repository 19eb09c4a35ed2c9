"""AvroCodec: round trips of every schema, Confluent byte compatibility, precise decode errors,
and the fixed-width patch keys."""

from __future__ import annotations

import struct
import uuid
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, record_subject_name_strategy
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from wire.codec import (
    PATCH_KEY_BYTES,
    AvroCodec,
    DecodeError,
    EncodeError,
    PatchKey,
    PatchKind,
    UnknownSchemaIdError,
    decode_patch_key,
    encode_patch_key,
    int32_key,
    int64_key,
)
from wire.registry import DEFAULT_SCHEMA_DIR, ConfluentRegistry, InProcessRegistry

TOKENS = struct.pack("<4i", 1, 2, 3, 40_000)

# One representative record per schema; floats are exactly representable in 32 bits.
SAMPLES: dict[str, dict[str, Any]] = {
    "KvEvent": {
        "worker_id": 7, "region_id": 1, "model": "m/llama", "sharing_group": None, "op": "STORED",
        "tier": "VRAM", "token_count": 4, "token_ids": TOKENS, "block_hashes": [-5, 2**62],
        "parent_block_hash": None, "block_size_tokens": 16, "registration_lengths": [128, 256],
        "registration_keys": [2**63 - 1, 0], "engine_seq": 42, "timestamp_ms": 1_796_000_000_000,
        "cache_state": "UNKNOWN",
    },
    "IndexOp": {
        "key": 2**63 - 1, "table": 3, "shard": 1, "field": 15, "op": "SET", "tier": "DRAM",
        "source": {"worker_id": 7, "engine_seq": 42, "topic": "kv-events", "partition": 2,
                   "offset": 1234, "timestamp_ms": 1_796_000_000_000},
    },
    "IndexOpBatch": {
        "shard": 1, "runs": bytes(range(16)),
        "keys": (2**63 - 1).to_bytes(8, "little") + (5).to_bytes(8, "little"),
        "source_topic": "kv-events", "sources": bytes(range(40)),
    },
    "IndexPatch": {
        "table": 3, "shard": 1, "epoch": 2, "kind": "BUCKET", "index": 99_999,
        "image": bytes(range(64)), "seq": 77, "source_offset": 1234,
        "timestamp_ms": 1_796_000_000_001, "source_produced_ms": 1_796_000_000_000,
    },
    "QueueVector": {
        "region_id": 2, "worker_ids": [0, 1, 2], "queue_ms": [0.0, 12.5, 250.25], "seq": 9,
        "timestamp_ms": 1_796_000_000_002, "bridged_worker_ids": [1, 2],
        "cache_unknown_worker_ids": [2], "reporter": "edge", "to_region_id": 1,
        "announce": False, "in_flight_worker_ids": [5],
        "in_flight_arrive_ms": [1_796_000_000_042.5], "in_flight_work_ms": [120.5],
    },
    "MigrationRequest": {
        "request_id": "mig-1", "model": "m/llama", "prefix_tokens": TOKENS,
        "prefix_length_tokens": 4, "prefix_key": 123, "first_level_key": 456,
        "source_worker_id": 3, "target_worker_id": 4, "edge_region_id": 0,
        "mode": "CROSS_REGION_RECOMPUTE", "tier": "DRAM", "created_ms": 1_796_000_000_003,
    },
    "RoutingDecision": {
        "request_id": "req-1", "edge_region_id": 0, "model": "m/llama", "prompt_tokens": 2048,
        "chosen_worker_id": 4, "chosen_region_id": 1, "matched_tokens": 1024, "tier": "VRAM",
        "load_factor": 0.5,
        "candidates": [
            {"worker_id": 4, "region_id": 1, "matched_tokens": 1024, "tier": "VRAM",
             "belief": 0.75, "wan_ms": 40.0, "queue_ms": 3.5, "prefill_ms": 100.0,
             "reload_ms": 0.0, "score_ms": 143.5},
            {"worker_id": 0, "region_id": 0, "matched_tokens": 0, "tier": "NONE",
             "belief": 1.0, "wan_ms": 0.0, "queue_ms": 1.0, "prefill_ms": 204.8,
             "reload_ms": 0.0, "score_ms": 205.8},
        ],
        "timestamp_ms": 1_796_000_000_004,
    },
    "DeadLetter": {
        "original_topic": "kv-events", "original_partition": 0, "original_offset": 5,
        "original_key": b"\x00\x00\x00\x07", "reason_code": "UNDECODABLE",
        "reason": "expected magic byte 0x00; got 0x7b", "consumer": "rechunk",
        "raw": b'{"not": "avro"}', "timestamp_ms": 1_796_000_000_005, "raw_size_bytes": 15,
        "raw_sha256": bytes(range(32)), "original_key_size_bytes": 4,
    },
    "ShardSnapshotChunk": {"shard": 2, "snapshot_id": 1_796_000_000_006, "index": 3,
                           "data": bytes(range(48))},
    "ShardSnapshotManifest": {
        "shard": 2, "snapshot_id": 1_796_000_000_006, "covered_offset": 1234, "seq": 77,
        "created_ms": 1_796_000_000_006, "n_chunks": 4, "total_bytes": 48 * 4,
        "sha256": bytes(range(32)),
        "tables": [{"table": 0, "epoch": 2, "n_keys": 6}, {"table": 1, "epoch": 0, "n_keys": 0}],
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def codec() -> AvroCodec:
    return AvroCodec(InProcessRegistry(), validate=True)


def test_samples_cover_every_schema__manifest() -> None:
    assert set(SAMPLES) == set(InProcessRegistry().names)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_record_round_trips__every_schema(codec: AvroCodec, name: str) -> None:
    data = codec.encode(name, SAMPLES[name])
    assert data[0] == 0
    assert struct.unpack(">I", data[1:5])[0] == InProcessRegistry().writer_id(name)
    assert codec.decode(data) == (name, SAMPLES[name])


def test_defaults_fill_omitted_optional_fields__kv_event(codec: AvroCodec) -> None:
    minimal = {k: v for k, v in SAMPLES["KvEvent"].items() if k not in ("token_ids", "block_hashes",
               "parent_block_hash", "block_size_tokens", "registration_lengths",
               "registration_keys", "sharing_group")}  # fmt: skip
    _, got = AvroCodec(InProcessRegistry()).decode(codec.encode("KvEvent", minimal))
    assert got["token_ids"] is None
    assert got["block_hashes"] == []
    assert got["block_size_tokens"] == 16


def test_encode_is_repeatable__buffer_reused(codec: AvroCodec) -> None:
    first = codec.encode("IndexPatch", SAMPLES["IndexPatch"])
    codec.encode("RoutingDecision", SAMPLES["RoutingDecision"])
    assert codec.encode("IndexPatch", SAMPLES["IndexPatch"]) == first


@pytest.mark.parametrize("name", ["IndexPatch", "KvEvent", "RoutingDecision"])
def test_bytes_identical_to_confluent_serializer__mock_registry(name: str) -> None:
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    ours = AvroCodec(ConfluentRegistry(client))
    schema_text = (DEFAULT_SCHEMA_DIR / _file_of(name)).read_text()
    conf = {"auto.register.schemas": True, "subject.name.strategy": record_subject_name_strategy}
    serializer = AvroSerializer(client, schema_text, conf=conf)
    ctx = SerializationContext("t", MessageField.VALUE)
    theirs = serializer(SAMPLES[name], ctx)
    assert ours.encode(name, SAMPLES[name]) == theirs
    assert ours.decode(theirs) == (name, SAMPLES[name])
    assert AvroDeserializer(client)(ours.encode(name, SAMPLES[name]), ctx) == SAMPLES[name]


def test_wrong_magic_raises__decode(codec: AvroCodec) -> None:
    data = bytearray(codec.encode("IndexPatch", SAMPLES["IndexPatch"]))
    data[0] = 0x7B
    with pytest.raises(DecodeError, match="magic byte 0x00; got 0x7b"):
        codec.decode(bytes(data))


def test_short_header_raises__decode(codec: AvroCodec) -> None:
    with pytest.raises(DecodeError, match="at least 5 bytes"):
        codec.decode(b"\x00\x00\x00")


def test_unknown_schema_id_raises__decode(codec: AvroCodec) -> None:
    with pytest.raises(UnknownSchemaIdError, match="got 4242") as info:
        codec.decode(b"\x00" + struct.pack(">I", 4242) + b"\x02")
    assert info.value.reason_code == "UNKNOWN_SCHEMA"
    assert isinstance(info.value, InvalidInputError)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncation_raises__decode(codec: AvroCodec, name: str) -> None:
    data = codec.encode(name, SAMPLES[name])
    for cut in range(5, len(data)):
        with pytest.raises(DecodeError) as info:
            codec.decode(data[:cut])
        assert info.value.reason_code == "UNDECODABLE"


def test_trailing_bytes_raise__decode(codec: AvroCodec) -> None:
    data = codec.encode("QueueVector", SAMPLES["QueueVector"])
    with pytest.raises(DecodeError, match="3 trailing bytes"):
        codec.decode(data + b"abc")


def test_missing_field_raises__encode(codec: AvroCodec) -> None:
    record = dict(SAMPLES["IndexPatch"])
    del record["seq"]
    with pytest.raises(EncodeError, match="IndexPatch"):
        AvroCodec(InProcessRegistry()).encode("IndexPatch", record)


def test_unknown_enum_symbol_raises__encode(codec: AvroCodec) -> None:
    record = {**SAMPLES["IndexPatch"], "kind": "SOMETHING"}
    with pytest.raises(EncodeError):
        AvroCodec(InProcessRegistry()).encode("IndexPatch", record)


def test_int_overflow_raises__validating_encode(codec: AvroCodec) -> None:
    record = {**SAMPLES["IndexPatch"], "table": 2**40}
    with pytest.raises(EncodeError):
        codec.encode("IndexPatch", record)


def test_unknown_schema_name_raises__encode(codec: AvroCodec) -> None:
    with pytest.raises(EncodeError, match="'NoSuchRecord'"):
        codec.encode("NoSuchRecord", {})


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**32 - 1),
    st.sampled_from(list(PatchKind)),
    st.integers(0, 2**64 - 1),
)
def test_patch_key_round_trips__any_fields(
    table: int, shard: int, epoch: int, kind: PatchKind, index: int
) -> None:
    key = encode_patch_key(table, shard, epoch, kind, index)
    assert len(key) == PATCH_KEY_BYTES == 22
    assert decode_patch_key(key) == PatchKey(table, shard, epoch, kind, index)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 9), st.integers(0, 3),
                          st.integers(0, 2**64 - 1)), min_size=2, max_size=8))  # fmt: skip
def test_patch_key_bytes_sort_like_tuples__big_endian(
    rows: list[tuple[int, int, int, int]],
) -> None:
    keys = [encode_patch_key(t, s, 1, k, i) for t, s, k, i in rows]
    assert sorted(keys) == [encode_patch_key(t, s, 1, k, i) for t, s, k, i in sorted(rows)]


def test_patch_key_layout__documented_offsets() -> None:
    key = encode_patch_key(1, 2, 3, PatchKind.LOCATOR_WORD, 4)
    assert key.hex() == "01000000010000000200000003020000000000000004"


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((-1, 0, 0, 0, 0), "table"),
        ((0, 2**32, 0, 0, 0), "shard"),
        ((0, 0, 0, 0, 2**64), "index"),
        ((0, 0, 0, 4, 0), "kind"),
    ],
)
def test_patch_key_out_of_range_raises__encode(args: tuple[int, ...], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        encode_patch_key(*args)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x01" * 21, "22 bytes; got 21"),
        (b"\x02" + bytes(21), "version 1; got 2"),
        (b"\x01" + bytes(12) + b"\x09" + bytes(8), "kind 0..3; got 9"),
    ],
)
def test_malformed_patch_key_raises__decode(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        decode_patch_key(data)


def test_plain_keys_are_big_endian__int32_int64() -> None:
    assert int32_key(7) == b"\x00\x00\x00\x07"
    assert int64_key(2**63 - 1) == b"\x7f" + b"\xff" * 7
    with pytest.raises(InvalidInputError):
        int64_key(2**63)
    with pytest.raises(InvalidInputError):
        int32_key(-1)


def _file_of(name: str) -> str:
    return {
        "IndexPatch": "index_patch.v2.avsc",
        "KvEvent": "kv_event.v2.avsc",
        "RoutingDecision": "routing_decision.avsc",
    }[name]
