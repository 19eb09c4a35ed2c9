"""Avro record encode/decode per record: ``wire.codec.AvroCodec`` vs confluent-kafka's own
``AvroSerializer`` / ``AvroDeserializer`` (same bytes; the unit tests check that).

Usage::

    .venv/bin/python bench/codec.py            # table
    .venv/bin/python bench/codec.py --json     # machine-readable

Both sides use one in-memory (``mock://``) registry client, so no network time is counted: what
differs is the per-record work around fastavro (the serializer's context, subject and schema
lookups and rule machinery against the codec's cached 5-byte header). Three records: a small
``QueueVector`` (every Δ per region), an ``IndexPatch`` bucket image (the patch topic's records)
and a ``KvEvent`` (one per worker cache change). Median of repeated runs (shared machine).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import struct
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

# bench/pipeline.py would shadow the pipeline package when this runs as bench/codec.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka.schema_registry import (
    SchemaRegistryClient,
    record_subject_name_strategy,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from wire.codec import AvroCodec
from wire.registry import DEFAULT_SCHEMA_DIR, ConfluentRegistry

RECORDS: dict[str, tuple[str, dict[str, Any]]] = {
    "QueueVector": ("queue_vector.avsc", {
        "region_id": 2, "worker_ids": list(range(8)), "queue_ms": [1.5] * 8, "seq": 9,
        "timestamp_ms": 1_796_000_000_002,
    }),
    "IndexPatch": ("index_patch.avsc", {
        "table": 3, "shard": 1, "epoch": 2, "kind": "BUCKET", "index": 99_999,
        "image": bytes(range(51)), "seq": 77, "source_offset": 1234,
        "timestamp_ms": 1_796_000_000_001,
    }),
    "KvEvent": ("kv_event.avsc", {
        "worker_id": 7, "region_id": 1, "model": "m/llama", "sharing_group": None, "op": "STORED",
        "tier": "VRAM", "token_count": 256, "token_ids": struct.pack("<256i", *range(256)),
        "block_hashes": list(range(16)), "parent_block_hash": None, "block_size_tokens": 16,
        "registration_lengths": [128, 256], "registration_keys": [2**62, 5], "engine_seq": 42,
        "timestamp_ms": 1_796_000_000_000,
    }),
}  # fmt: skip


def _per_record_us(fn: Callable[[], object], n: int, repeat: int) -> float:
    fn()
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(runs)


def _row(
    client: SchemaRegistryClient, ours: AvroCodec, name: str, n: int, repeat: int
) -> dict[str, Any]:
    file, rec = RECORDS[name]
    conf = {"auto.register.schemas": True, "subject.name.strategy": record_subject_name_strategy}
    ctx = SerializationContext("t", MessageField.VALUE)
    ser = AvroSerializer(client, (DEFAULT_SCHEMA_DIR / file).read_text(), conf=conf)
    deser = AvroDeserializer(client)
    wire = ser(rec, ctx)
    assert wire is not None and ours.encode(name, rec) == wire  # same bytes, or no contest
    return {
        "record": name,
        "bytes": len(wire),
        "codec_encode_us": _per_record_us(lambda: ours.encode(name, rec), n, repeat),
        "serializer_encode_us": _per_record_us(lambda: ser(rec, ctx), n, repeat),
        "codec_decode_us": _per_record_us(lambda: ours.decode(wire), n, repeat),
        "deserializer_decode_us": _per_record_us(lambda: deser(wire, ctx), n, repeat),
    }


def measure(n: int, repeat: int) -> list[dict[str, Any]]:
    client = SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    ours = AvroCodec(ConfluentRegistry(client))
    return [_row(client, ours, name, n, repeat) for name in RECORDS]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=5000, help="records per timed run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = measure(args.records, args.repeat)
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(), "rows": rows}))
        return
    print(f"{'record':<12} {'bytes':>5} {'encode µs codec/serializer':>28} "
          f"{'decode µs codec/deserializer':>30}")  # fmt: skip
    for r in rows:
        enc = f"{r['codec_encode_us']:.2f} / {r['serializer_encode_us']:.2f}"
        dec = f"{r['codec_decode_us']:.2f} / {r['deserializer_decode_us']:.2f}"
        print(f"{r['record']:<12} {r['bytes']:>5} {enc:>28} {dec:>30}")


if __name__ == "__main__":
    main()
