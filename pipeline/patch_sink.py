"""``index-patches`` on the wire: fast IndexPatch encode/decode, and the sink that produces them.

Owns turning ``ShardPatch``es (via ``kvcompass.patch_stream.explode``: one record per image) and
retired epoch pieces (tombstones: null values) into Kafka records, partition = shard, key = the
22-byte patch key (``pipeline.codec.encode_patch_key``), so compaction keeps the latest image of
every (table, shard, epoch, kind, index) and drops retired epochs.

The value is the ``IndexPatch`` record in the Confluent wire format, written here by hand because
the codec's ~5 µs per record would cap one maintenance process far below 100k key-ops/s. The
bytes are identical to ``AvroCodec.encode("IndexPatch", ...)`` (unit-tested)::

    0x00 | schema id (4, big-endian) | zz(table) zz(shard) zz(epoch) zz(kind) zz(index)
         | zz(len(image)) image | zz(seq) zz(source_offset) zz(timestamp_ms)

``zz`` = Avro ``long``/``int``/enum: zig-zag then base-128 varint, low group first. ``decode``
parses the same layout (and only it: a record with another schema id is left to the codec).

Must not: decide what to send (``pipeline.maintenance`` does) or hold index logic.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from kvcompass.index import ShardPatch
from kvcompass.ludo import PatchKind
from kvcompass.patch_stream import PatchRecord, explode
from pipeline.codec import HEADER_BYTES, MAGIC, DecodeError, encode_patch_key
from pipeline.maintenance import PatchKeyTuple

_PATCH_KEY = struct.Struct(">BIIIBQ")


class ProducerPort(Protocol):
    """The slice of ``confluent_kafka.Producer`` the sinks use (a list fakes it in tests)."""

    def produce(
        self, topic: str, value: bytes | None = ..., key: bytes | None = ..., partition: int = ...
    ) -> None: ...

    def poll(self, timeout: float = ...) -> int: ...

    def flush(self, timeout: float = ...) -> int: ...


def _zz(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_SMALL = [_zz(i) for i in range(1 << 13)]


def _zzf(n: int) -> bytes:
    return _SMALL[n] if 0 <= n < 8192 else _zz(n)


def encode_records(
    schema_id: int, records: Iterable[PatchRecord], source_offset: int, timestamp_ms: int
) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` wire bytes of image records (all of one shard, any tables)."""
    head = bytes([MAGIC]) + schema_id.to_bytes(4, "big")
    tail_cache: dict[int, bytes] = {}
    prefix_cache: dict[tuple[int, int, int], bytes] = {}
    tail_rest = _zz(source_offset) + _zz(timestamp_ms)
    pack = _PATCH_KEY.pack
    out: list[tuple[bytes, bytes]] = []
    for r in records:
        pk = (r.table, r.shard, r.epoch)
        prefix = prefix_cache.get(pk)
        if prefix is None:
            prefix = head + _zz(r.table) + _zz(r.shard) + _zz(r.epoch)
            prefix_cache[pk] = prefix
        tail = tail_cache.get(r.seq)
        if tail is None:
            tail = _zz(r.seq) + tail_rest
            tail_cache[r.seq] = tail
        kind = int(r.kind)
        value = b"".join((prefix, _SMALL[kind], _zzf(r.index), _SMALL[len(r.image)], r.image, tail))
        out.append((pack(1, r.table, r.shard, r.epoch, kind, r.index), value))
    return out


@dataclass(frozen=True, slots=True)
class DecodedPatch:
    """One ``index-patches`` value, decoded."""

    record: PatchRecord
    source_offset: int
    timestamp_ms: int


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    z = 0
    while True:
        if pos >= len(data):
            raise DecodeError("IndexPatch: truncated varint")
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if not b & 0x80:
            return (z >> 1) ^ -(z & 1), pos
        shift += 7
        if shift > 63:
            raise DecodeError("IndexPatch: varint longer than 10 bytes")


def decode_value(schema_id: int, data: bytes) -> DecodedPatch:
    """Parse an IndexPatch value written with ``schema_id``; ``DecodeError`` on anything else."""
    if len(data) < HEADER_BYTES or data[0] != MAGIC:
        raise DecodeError("IndexPatch: expected magic 0x00 and a 4-byte schema id")
    got = int.from_bytes(data[1:5], "big")
    if got != schema_id:
        raise DecodeError(f"IndexPatch: expected schema id {schema_id}; got {got}")
    pos = HEADER_BYTES
    table, pos = _varint(data, pos)
    shard, pos = _varint(data, pos)
    epoch, pos = _varint(data, pos)
    kind, pos = _varint(data, pos)
    index, pos = _varint(data, pos)
    size, pos = _varint(data, pos)
    if not 0 <= kind <= 3 or size < 0 or pos + size > len(data):
        raise DecodeError(f"IndexPatch: bad kind {kind} or image size {size}")
    image = data[pos : pos + size]
    pos += size
    seq, pos = _varint(data, pos)
    source_offset, pos = _varint(data, pos)
    ts, pos = _varint(data, pos)
    if pos != len(data):
        raise DecodeError(f"IndexPatch: {len(data) - pos} trailing bytes")
    rec = PatchRecord(table, shard, epoch, PatchKind(kind), index, seq, bytes(image))
    return DecodedPatch(rec, source_offset, ts)


def decode_key(data: bytes) -> PatchKeyTuple:
    """``(table, shard, epoch, kind, index)`` of a 22-byte patch key; ``DecodeError`` if not."""
    if len(data) != _PATCH_KEY.size:
        raise DecodeError(f"patch key: expected {_PATCH_KEY.size} bytes; got {len(data)}")
    version, t, s, e, k, i = _PATCH_KEY.unpack(data)
    if version != 1 or k > 3:
        raise DecodeError(f"patch key: expected version 1 and kind 0..3; got {version}, {k}")
    return (t, s, e, k, i)


class PatchSink:
    """Sends a unit's steps to ``index-patches`` (partition = shard)."""

    def __init__(self, producer: ProducerPort, topic: str, schema_id: int) -> None:
        self.producer = producer
        self.topic = topic
        self.schema_id = schema_id
        self.records_sent = 0
        self.tombstones_sent = 0

    def send(
        self,
        patches: Iterable[ShardPatch],
        retired: Iterable[PatchKeyTuple],
        source_offset: int,
        timestamp_ms: int,
    ) -> None:
        """Images of ``patches`` in order, then a tombstone per retired key."""
        produce = self.producer.produce
        topic = self.topic
        for p in patches:
            for key, value in encode_records(
                self.schema_id, explode(p), source_offset, timestamp_ms
            ):
                try:
                    produce(topic, value, key, p.shard)
                except BufferError:
                    self.producer.poll(0.05)
                    produce(topic, value, key, p.shard)
                self.records_sent += 1
        for t, s, e, k, i in retired:
            produce(topic, None, encode_patch_key(t, s, e, k, i), s)
            self.tombstones_sent += 1
        self.producer.poll(0)
