"""``index-patches`` on the wire: fast IndexPatch encode/decode, and the sink that produces them.

Owns turning ``ShardPatch``es (via ``kvcompass.patch_stream.explode``: one record per image) and
retired epoch pieces (tombstones: null values) into Kafka records, partition = shard, key = the
22-byte patch key (``wire.codec.encode_patch_key``), so compaction keeps the latest image of
every (table, shard, epoch, kind, index) and drops retired epochs.

The value is the ``IndexPatch`` record in the Confluent wire format, its body written here by
hand because the codec's ~5 µs per record would cap one maintenance process far below 100k
key-ops/s; the framing is the codec's (``wire.codec.value_header``, confluent-kafka's
``SchemaId``). The bytes are identical to ``AvroCodec.encode("IndexPatch", ...)``
(unit-tested)::

    0x00 | schema id (4, big-endian) | zz(table) zz(shard) zz(epoch) zz(kind) zz(index)
         | zz(len(image)) image | zz(seq) zz(source_offset) zz(timestamp_ms)

``zz`` = Avro ``long``/``int``/enum: zig-zag then base-128 varint, low group first. ``decode``
parses the same layout (and only it: a record with another schema id is left to the codec).

Must not: decide what to send (``kvcompass.maintenance`` does) or hold index logic.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.index import ShardPatch
from kvcompass.ludo import PatchBatch, PatchKind
from kvcompass.maintenance import PatchKeyTuple
from kvcompass.patch_stream import PatchRecord
from wire.codec import (
    HEADER_BYTES,
    MAGIC,
    PATCH_KEY,
    DecodeError,
    encode_patch_key,
    value_header,
)
from wire.producer import ProducerPort


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
    schema_id: int,
    records: Iterable[PatchRecord],
    source_offset: int,
    timestamp_ms: int,
    produced_ms: int = -1,
) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` wire bytes of image records (all of one shard, any tables), written as
    ``IndexPatch`` v2 (``source_produced_ms`` = ``produced_ms``) unless ``schema_id`` is v1's."""
    head = value_header(schema_id)
    tail_cache: dict[int, bytes] = {}
    prefix_cache: dict[tuple[int, int, int], bytes] = {}
    tail_rest = _tail(schema_id, source_offset, timestamp_ms, produced_ms)
    pack = PATCH_KEY.pack
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


V1_SCHEMA_ID = 3
"""``IndexPatch`` v1 (no ``source_produced_ms``): still read, written only when asked for."""


def _tail(schema_id: int, source_offset: int, timestamp_ms: int, produced_ms: int) -> bytes:
    tail = _zz(source_offset) + _zz(timestamp_ms)
    return tail if schema_id == V1_SCHEMA_ID else tail + _zz(produced_ms)


def _varints(values: NDArray[np.int64]) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """Zig-zag varints of non-negative values: an (n, 10) byte matrix and each one's length."""
    z = values.astype(np.uint64) << np.uint64(1)
    out = np.zeros((values.shape[0], 10), np.uint8)
    counts = np.ones(values.shape[0], np.int64)
    for k in range(10):
        more = (z >> np.uint64(7 * (k + 1))) != 0
        group = ((z >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[:, k] = group | (more.astype(np.uint8) << np.uint8(7))
        counts += more
    return out, counts


def _rows(
    head: bytes, ids: NDArray[np.int64], images: NDArray[np.uint8], tail: bytes
) -> list[bytes]:
    """Values ``head | zz(id) | zz(len) image | tail`` for every row, built in one numpy pass."""
    n, w = images.shape
    var, counts = _varints(ids)
    size = _zz(w)
    a, b = len(head), len(head) + 10
    c = b + len(size)
    width = c + w + len(tail)
    m = np.empty((n, width), np.uint8)
    m[:, :a] = np.frombuffer(head, np.uint8)
    m[:, a:b] = var
    m[:, b:c] = np.frombuffer(size, np.uint8)
    m[:, c : c + w] = images
    m[:, c + w :] = np.frombuffer(tail, np.uint8)
    keep = np.ones((n, width), np.bool_)
    keep[:, a:b] = np.arange(10) < counts[:, None]
    blob = m[keep].tobytes()
    ends = np.cumsum(width - 10 + counts).tolist()
    return [blob[i - (width - 10 + int(k)) : i] for i, k in zip(ends, counts.tolist(), strict=True)]


def _keys(table: int, shard: int, epoch: int, kind: int, ids: NDArray[np.int64]) -> list[bytes]:
    n = ids.shape[0]
    m = np.empty((n, PATCH_KEY.size), np.uint8)
    m[:, :14] = np.frombuffer(PATCH_KEY.pack(1, table, shard, epoch, kind, 0)[:14], np.uint8)
    m[:, 14:] = ids.astype(">u8").view(np.uint8).reshape(n, 8)
    blob = m.tobytes()
    w = PATCH_KEY.size
    return [blob[i : i + w] for i in range(0, n * w, w)]


def _bucket_matrix(b: PatchBatch) -> NDArray[np.uint8]:
    """BUCKET images (``kvcompass.patch_stream`` layout) of every bucket of ``b``, one per row."""
    p = b.params
    n, vb, fb = b.bucket_ids.shape[0], 4 * p.value_words, p.fp_bytes
    row = np.zeros((n, 3 + 4 * vb + 4 * fb), dtype=np.uint8)
    row[:, 0] = b.bucket_seeds
    row[:, 1] = vb
    row[:, 2] = fb
    vals = b.bucket_values.astype("<u8") if vb == 8 else b.bucket_values.astype("<u4")
    row[:, 3 : 3 + 4 * vb] = vals.view(np.uint8).reshape(n, 4 * vb)
    if fb:
        fps = b.bucket_fps.astype("<u2" if fb == 2 else np.uint8)
        row[:, 3 + 4 * vb :] = fps.view(np.uint8).reshape(n, 4 * fb)
    return row


def encode_patch(
    schema_id: int,
    patch: ShardPatch,
    source_offset: int,
    timestamp_ms: int,
    produced_ms: int = -1,
) -> tuple[list[bytes], list[bytes]]:
    """Keys and values of every image of ``patch`` in apply order; equal to ``encode_records``
    over ``explode(patch)``, but vectorised (the maintenance hot path)."""
    b = patch.batch
    t, s, e, q = patch.table, patch.shard, b.params.epoch, patch.seq
    head = value_header(schema_id) + _zz(t) + _zz(s) + _zz(e)
    tail = _zz(q) + _tail(schema_id, source_offset, timestamp_ms, produced_ms)
    keys: list[bytes] = []
    values: list[bytes] = []
    single = []
    if b.header:
        image = b.params.to_array().astype("<u8").tobytes()
        single.append(PatchRecord(t, s, e, PatchKind.HEADER, 0, q, image))
    for k, v in encode_records(schema_id, single, source_offset, timestamp_ms, produced_ms):
        keys.append(k)
        values.append(v)
    kinds = (
        (PatchKind.BUCKET, b.bucket_ids, _bucket_matrix(b)),
        (PatchKind.LOCATOR_WORD, b.word_ids,
         b.words.astype("<u8").view(np.uint8).reshape(-1, 8)),
    )  # fmt: skip
    for kind, ids, images in kinds:
        if ids.shape[0]:
            keys.extend(_keys(t, s, e, int(kind), ids))
            values.extend(_rows(head + _SMALL[int(kind)], ids, images, tail))
    if b.commit:
        rec = PatchRecord(t, s, e, PatchKind.COMMIT, 0, q, b"")
        for k, v in encode_records(schema_id, [rec], source_offset, timestamp_ms, produced_ms):
            keys.append(k)
            values.append(v)
    return keys, values


@dataclass(frozen=True, slots=True)
class DecodedPatch:
    """One ``index-patches`` value, decoded."""

    record: PatchRecord
    source_offset: int
    timestamp_ms: int
    source_produced_ms: int = -1


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
    if got != schema_id and got != V1_SCHEMA_ID:
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
    produced = -1
    if got != V1_SCHEMA_ID:
        produced, pos = _varint(data, pos)
    if pos != len(data):
        raise DecodeError(f"IndexPatch: {len(data) - pos} trailing bytes")
    rec = PatchRecord(table, shard, epoch, PatchKind(kind), index, seq, bytes(image))
    return DecodedPatch(rec, source_offset, ts, produced)


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
        produced_ms: int = -1,
    ) -> None:
        """Images of ``patches`` in order, then a tombstone per retired key; ``produced_ms``:
        the oldest source event's Kafka timestamp (-1: not from events)."""
        produce = self.producer.produce
        # pipeline.delivery's (one count per batch); not confluent-kafka's own produce_batch
        batch = getattr(self.producer, "produce_partition", None)
        topic = self.topic
        for p in patches:
            keys, values = encode_patch(self.schema_id, p, source_offset, timestamp_ms, produced_ms)
            shard = p.shard
            if batch is not None:
                batch(topic, shard, keys, values)
                self.records_sent += len(keys)
                continue
            for key, value in zip(keys, values, strict=True):
                try:
                    produce(topic, value, key, shard)
                except BufferError:
                    self.producer.poll(0.05)
                    produce(topic, value, key, shard)
            self.records_sent += len(keys)
        for t, s, e, k, i in retired:
            produce(topic, None, encode_patch_key(t, s, e, k, i), s)
            self.tombstones_sent += 1
        self.producer.poll(0)
