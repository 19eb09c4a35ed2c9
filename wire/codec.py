"""Avro records in the Confluent wire format, and the fixed-width Kafka record keys.

Value wire format (identical to ``confluent_kafka.schema_registry.avro.AvroSerializer`` output)::

    offset  size  field
    0       1     magic, always 0x00
    1       4     schema id, unsigned big-endian (wire.registry; schemas/ids.json)
    5       n     Avro binary body of the record, no container, no schema (fastavro schemaless)

The framing (magic + id) is confluent-kafka's own ``SchemaId`` (``id_to_bytes`` /
``from_bytes``, what its serializers call); the body is fastavro's, as inside those serializers.
Not the serializers themselves (``AvroSerializer`` / ``AvroDeserializer``, same bytes, unit-tested
in ``tests/unit/pipeline/test_codec.py``): measured too slow for the per-record paths
(``bench/codec.py``, 2026-12-01, 2 shared vCPUs at load ≈ 15, so ratios, not absolute figures):
decoding is 3.3–6× slower (QueueVector 39 → 139–281 µs, IndexPatch 40–42 → 223–261 µs,
KvEvent 87–107 → 507–633 µs) and encoding a small record ~1.1–2× slower (QueueVector 51 → 87–103
µs, IndexPatch 53–73 → 79–100 µs; a 1 KB KvEvent is on a par, 187–209 vs 147–172 µs), for the
per-call context, subject and rule machinery around the same fastavro calls. The rechunk agent
decodes every ``KvEvent`` and every edge every queue vector and migration request.

Patch key (Kafka key of every ``index-patches`` record; compaction keeps the latest value per key)::

    offset  size  field
    0       1     key format version, 1
    1       4     table, unsigned big-endian
    5       4     shard, unsigned big-endian (also the partition)
    9       4     epoch, unsigned big-endian
    13      1     kind: 0 HEADER, 1 BUCKET, 2 LOCATOR_WORD, 3 COMMIT (order of the Avro enum)
    14      8     index, unsigned big-endian (bucket or locator-word number; 0 otherwise)
    = 22 bytes; big-endian, so byte order sorts like the tuple.

Other topics key by a plain id: ``int32_key`` (4-byte big-endian: worker, region) and
``int64_key`` (8-byte big-endian: prefix keys) or UTF-8 text (request id, topic name).

Owns: encode/decode and their precise errors. Must not: talk to Kafka, or choose schema ids
(that is the registry's). An ``AvroCodec`` reuses one buffer and is not thread-safe: one codec
per thread (asyncio tasks on one loop may share one).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any, ClassVar

from confluent_kafka.schema_registry.serde import SchemaId
from confluent_kafka.serialization import SerializationError
from fastavro import schemaless_reader, schemaless_writer
from fastavro.validation import ValidationError
from fastavro.validation import validate as avro_validate

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import PatchKind  # its values are the positions in the Avro enum
from wire.registry import ParsedSchema, RegisteredSchema, SchemaRegistry, UnknownSchemaError

MAGIC = 0
HEADER_BYTES = 5
"""Magic byte + 4-byte schema id (``SchemaId.id_to_bytes`` of a numeric id)."""
_AVRO = "AVRO"

PATCH_KEY_VERSION = 1
PATCH_KEY = struct.Struct(">BIIIBQ")
"""The 22-byte patch key's layout (the module docstring): its one definition."""
PATCH_KEY_BYTES = PATCH_KEY.size
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

# fastavro signals bad input with these; anything else is a bug and should surface as itself.
_ENCODE_FAILURES = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    OverflowError,
    struct.error,
    ValidationError,
)
_DECODE_FAILURES = (
    EOFError,
    IndexError,
    ValueError,
    TypeError,
    OverflowError,
    UnicodeDecodeError,
    MemoryError,
    struct.error,
)


def value_header(schema_id: int) -> bytes:
    """The 5-byte framing of a value written with ``schema_id`` (confluent-kafka's ``SchemaId``)."""
    return SchemaId(_AVRO, schema_id).id_to_bytes()


class DecodeError(InvalidInputError):
    """Bytes that are not a record of a known schema in the Confluent wire format.

    ``reason_code`` is the ``DeadLetterReason`` symbol a consumer files the record under.
    """

    reason_code: ClassVar[str] = "UNDECODABLE"


class UnknownSchemaIdError(DecodeError):
    """Well-formed header whose schema id the registry does not know."""

    reason_code: ClassVar[str] = "UNKNOWN_SCHEMA"


class EncodeError(InvalidInputError):
    """A record that does not fit its schema (missing field, wrong type, unknown enum symbol)."""


@dataclass(frozen=True, slots=True)
class PatchKey:
    """Decoded ``index-patches`` record key."""

    table: int
    shard: int
    epoch: int
    kind: PatchKind
    index: int

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        """``(table, shard, epoch, kind, index)``: the maintenance side's ``PatchKeyTuple``."""
        return (self.table, self.shard, self.epoch, int(self.kind), self.index)


class AvroCodec:
    """Encode and decode records by short schema name (``"IndexPatch"``) through a registry.

    Writer and reader schemas and the 5-byte headers are cached per name and per id, so after
    the first record of a kind the registry is not consulted. ``validate=True`` additionally runs
    fastavro's full validation before writing (catches ``int`` overflow, which the plain writer
    does not); use it for low-rate producers and tests, not the patch hot path.
    """

    def __init__(self, registry: SchemaRegistry, *, validate: bool = False) -> None:
        self._registry = registry
        self._validate = validate
        self._writers: dict[str, tuple[bytes, ParsedSchema]] = {}
        self._readers: dict[int, RegisteredSchema] = {}
        self._buf = BytesIO()

    @property
    def registry(self) -> SchemaRegistry:
        """The registry this codec resolves schema ids with."""
        return self._registry

    def encode(self, schema_name: str, record: Mapping[str, Any]) -> bytes:
        """Wire bytes of ``record`` written with the registry's current schema of the name."""
        writer = self._writers.get(schema_name)
        if writer is None:
            writer = self._load_writer(schema_name)
        header, schema = writer
        if self._validate:
            try:
                avro_validate(record, schema, raise_errors=True)
            except _ENCODE_FAILURES as exc:
                raise EncodeError(f"{schema_name}: record does not fit the schema: {exc}") from exc
        buf = self._buf
        buf.seek(0)
        buf.truncate()
        buf.write(header)
        try:
            schemaless_writer(buf, schema, record)
        except _ENCODE_FAILURES as exc:
            raise EncodeError(f"{schema_name}: record does not fit the schema: {exc}") from exc
        return buf.getvalue()

    def decode(self, data: bytes | bytearray | memoryview) -> tuple[str, dict[str, Any]]:
        """``(schema name, record)`` of wire bytes, read into the newest local schema of the name.

        Raises ``DecodeError`` (wrong magic, short header, truncated or malformed body, trailing
        bytes) or ``UnknownSchemaIdError``; never returns a partial record.
        """
        size = len(data)
        if size < HEADER_BYTES:
            raise DecodeError(
                f"expected at least {HEADER_BYTES} bytes (magic + schema id); got {size}"
            )
        framing = SchemaId(_AVRO)
        try:
            body = framing.from_bytes(BytesIO(data))
        except (SerializationError, ValueError, struct.error):
            body = None
        # magic 0x01 frames a schema GUID, which this project's registries never assign
        schema_id = framing.id
        if body is None or schema_id is None:
            raise DecodeError(f"expected magic byte 0x00; got 0x{data[0]:02x}")
        resolved = self._readers.get(schema_id)
        if resolved is None:
            resolved = self._resolve(schema_id)
        try:
            record = schemaless_reader(body, resolved.writer, resolved.reader)
        except _DECODE_FAILURES as exc:
            raise DecodeError(
                f"{resolved.name} (schema id {schema_id}): body of {size - HEADER_BYTES} bytes "
                f"is truncated or malformed: {type(exc).__name__}: {exc}"
            ) from exc
        if body.tell() != size:
            raise DecodeError(
                f"{resolved.name} (schema id {schema_id}): {size - body.tell()} trailing bytes "
                f"after a {body.tell() - HEADER_BYTES}-byte body"
            )
        if not isinstance(record, dict):
            raise DecodeError(f"{resolved.name}: expected a record; got {type(record).__name__}")
        return resolved.name, record

    def _load_writer(self, schema_name: str) -> tuple[bytes, ParsedSchema]:
        try:
            schema_id = self._registry.writer_id(schema_name)
        except UnknownSchemaError as exc:
            raise EncodeError(str(exc)) from exc
        writer = (value_header(schema_id), self._registry.writer_schema(schema_name))
        self._writers[schema_name] = writer
        return writer

    def _resolve(self, schema_id: int) -> RegisteredSchema:
        try:
            resolved = self._registry.resolve(schema_id)
        except UnknownSchemaError as exc:
            raise UnknownSchemaIdError(str(exc)) from exc
        self._readers[schema_id] = resolved
        return resolved


def encode_patch_key(
    table: int, shard: int, epoch: int, kind: PatchKind | int, index: int
) -> bytes:
    """22-byte ``index-patches`` key (layout in the module docstring)."""
    for name, value, top in (
        ("table", table, _U32_MAX),
        ("shard", shard, _U32_MAX),
        ("epoch", epoch, _U32_MAX),
        ("index", index, _U64_MAX),
    ):
        if not 0 <= value <= top:
            raise InvalidInputError(f"patch key {name}: expected 0..{top}; got {value}")
    try:
        kind = PatchKind(kind)
    except ValueError:
        raise InvalidInputError(
            f"patch key kind: expected one of {[int(k) for k in PatchKind]}; got {kind}"
        ) from None
    return PATCH_KEY.pack(PATCH_KEY_VERSION, table, shard, epoch, kind, index)


def decode_patch_key(data: bytes | bytearray | memoryview) -> PatchKey:
    """Inverse of ``encode_patch_key``; ``DecodeError`` on wrong size, version or kind."""
    if len(data) != PATCH_KEY_BYTES:
        raise DecodeError(f"patch key: expected {PATCH_KEY_BYTES} bytes; got {len(data)}")
    version, table, shard, epoch, kind, index = PATCH_KEY.unpack(data)
    if version != PATCH_KEY_VERSION:
        raise DecodeError(f"patch key: expected version {PATCH_KEY_VERSION}; got {version}")
    if kind >= len(PatchKind):
        raise DecodeError(f"patch key: expected kind 0..{len(PatchKind) - 1}; got {kind}")
    return PatchKey(table, shard, epoch, PatchKind(kind), index)


def int32_key(value: int) -> bytes:
    """4-byte big-endian key of a worker or region id (``kv-events``, ``queue-vectors``)."""
    if not 0 <= value <= _U32_MAX:
        raise InvalidInputError(f"int32 key: expected 0..{_U32_MAX}; got {value}")
    return value.to_bytes(4, "big")


def worker_key_mismatch(key: bytes | None, worker_id: int) -> str | None:
    """Why ``key`` is not the Kafka key a ``kv-events`` record of worker ``worker_id`` must have
    (``int32_key(worker_id)``: the key keeps one worker's events on one partition, in order);
    None if it is."""
    if 0 <= worker_id <= _U32_MAX and key == worker_id.to_bytes(4, "big"):
        return None
    got = "no key" if key is None else f"key {key[:16].hex()} ({len(key)} bytes)"
    return f"key: expected worker_id {worker_id} as 4-byte big-endian; got {got}"


def int64_key(value: int) -> bytes:
    """8-byte big-endian key of a 63-bit prefix key (``index-ops``, ``migrations``)."""
    if not 0 <= value < 1 << 63:
        raise InvalidInputError(f"int64 key: expected 0..2**63-1; got {value}")
    return value.to_bytes(8, "big")
