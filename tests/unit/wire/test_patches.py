"""Patch wire: hand-written IndexPatch bytes equal the codec's; the sink keys and partitions."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.index import DiscoveryIndex
from kvcompass.ludo import PatchKind
from kvcompass.patch_stream import PatchRecord, explode
from tests.kv_event_fixtures import LAYOUT
from wire.codec import AvroCodec, decode_patch_key
from wire.patches import PatchSink, decode_value, encode_records
from wire.producer import MemoryProducer
from wire.registry import InProcessRegistry

REG = InProcessRegistry()
SID = REG.writer_id("IndexPatch")
CODEC = AvroCodec(REG, validate=True)


def test_patch_kind_values_are_the_avro_enum_positions__index_patch_schema() -> None:
    import json

    from wire.registry import DEFAULT_SCHEMA_DIR

    schema = json.loads((DEFAULT_SCHEMA_DIR / "index_patch.avsc").read_text())
    kind = next(f["type"] for f in schema["fields"] if f["name"] == "kind")
    assert [k.name for k in sorted(PatchKind)] == kind["symbols"]


@settings(max_examples=150, deadline=None)
@given(
    table=st.integers(0, 2**31 - 1), shard=st.integers(0, 2**31 - 1),
    epoch=st.integers(0, 2**31 - 1), kind=st.sampled_from(list(PatchKind)),
    index=st.integers(0, 2**62), seq=st.integers(0, 2**62), image=st.binary(max_size=300),
    offset=st.integers(-1, 2**62), ts=st.integers(0, 2**62),
)  # fmt: skip
def test_encoded_value_equals_codec_and_decodes_back__any_record(
    table: int, shard: int, epoch: int, kind: PatchKind, index: int, seq: int, image: bytes,
    offset: int, ts: int,
) -> None:  # fmt: skip
    rec = PatchRecord(table, shard, epoch, kind, index, seq, image)
    ((key, value),) = encode_records(SID, [rec], offset, ts)
    want = CODEC.encode("IndexPatch", {
        "table": table, "shard": shard, "epoch": epoch, "kind": kind.name, "index": index,
        "image": image, "seq": seq, "source_offset": offset, "timestamp_ms": ts,
    })  # fmt: skip
    assert value == want
    k = decode_patch_key(key)
    assert (k.table, k.shard, k.epoch, int(k.kind), k.index) == rec.key == k.as_tuple()
    back = decode_value(SID, value)
    assert (back.record, back.source_offset, back.timestamp_ms) == (rec, offset, ts)


def test_sink_sends_images_then_tombstones_on_the_shard_partition__full_image() -> None:
    idx = DiscoveryIndex(LAYOUT, n_shards=2, initial_capacity=32)
    idx.register(0, np.arange(1, 40, dtype=np.uint64))
    patches = [p for p in idx.full_images() if p.shard == 1]
    producer = MemoryProducer()
    sink = PatchSink(producer, "t", SID)
    retired = [(0, 1, 0, int(PatchKind.BUCKET), 5)]
    sink.send(patches, retired, 17, 99)
    images = [r for p in patches for r in explode(p)]
    sent = producer.records
    assert len(sent) == len(images) + 1
    assert all(r.topic == "t" and r.partition == 1 for r in sent)
    assert all(r.value is not None for r in sent[:-1])
    decoded = [decode_value(SID, r.value or b"").record for r in sent[:-1]]
    assert decoded == images
    assert sent[-1].value is None and decode_patch_key(sent[-1].key or b"").as_tuple() == retired[0]
    assert (sink.records_sent, sink.tombstones_sent) == (len(images), 1)


def test_vectorised_encode_equals_per_record_encode__grown_table() -> None:
    from wire.patches import encode_patch

    idx = DiscoveryIndex(LAYOUT, n_shards=2, initial_capacity=16)
    patches = idx.register(0, np.arange(1, 300, dtype=np.uint64) * np.uint64(2**54 + 3))
    patches += idx.evict(0, np.arange(1, 50, dtype=np.uint64) * np.uint64(2**54 + 3))
    patches += idx.full_images()
    assert any(p.batch.header for p in patches)
    for p in patches:
        keys, values = encode_patch(SID, p, 2**40, 1_796_000_000_000)
        want = encode_records(SID, explode(p), 2**40, 1_796_000_000_000)
        assert list(zip(keys, values, strict=True)) == want
