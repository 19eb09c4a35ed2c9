"""Schema registry port: which Avro schema a schema id names, and which id to write a record with.

Owns the mapping between the repository's schemas (``schemas/*.avsc`` listed in
``schemas/ids.json``) and the 4-byte schema ids of the Confluent wire format, behind one small
protocol with two adapters:

- ``InProcessRegistry``: ids come from ``schemas/ids.json`` (fixed, documented, append-only), no
  network. The default, used by tests, the simulator and any deployment without a registry.
- ``ConfluentRegistry``: a Confluent-compatible registry server
  (``confluent_kafka.schema_registry``) under the RecordNameStrategy: subject = full record
  name, e.g. ``io.kvcompass.IndexPatch``. Used only when a URL is configured; ``mock://`` URLs
  give the client's in-memory mock.

Schema evolution (rules in ``schemas/README.md``): a changed schema is a new file and a new id;
old ids keep their files. Records are always decoded into the newest local schema of their name
(Avro schema resolution), so consumers see one shape whatever the writer's version.

Must not: encode or decode records (``wire.codec``), or do network I/O at import time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from fastavro import parse_schema
from fastavro.schema import fingerprint, to_parsing_canonical_form

from kvcompass.errors import ConfigError, InvalidInputError, KVCompassError

DEFAULT_SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"
NAMESPACE = "io.kvcompass"

ParsedSchema = dict[str, Any]
"""A schema as returned by ``fastavro.parse_schema`` (a dict fastavro has prepared)."""


class UnknownSchemaError(InvalidInputError):
    """A schema name or schema id that the registry does not know."""


class RegistryUnavailableError(KVCompassError):
    """The registry server could not be reached or answered with a server error."""


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """One schema id resolved: the record's short name and how to read bodies written with it."""

    schema_id: int
    name: str
    writer: ParsedSchema
    reader: ParsedSchema | None
    """Newest local schema of ``name`` if it differs from ``writer`` (read into it); else None."""


class SchemaRegistry(Protocol):
    """Port: schema ids for writing, schemas for reading."""

    def writer_id(self, name: str) -> int:
        """Schema id to encode a record of short name ``name`` (e.g. ``"IndexPatch"``) with."""
        ...

    def resolve(self, schema_id: int) -> RegisteredSchema:
        """The schema a body with ``schema_id`` was written with; ``UnknownSchemaError`` if none."""
        ...

    def writer_schema(self, name: str) -> ParsedSchema:
        """The parsed schema that ``writer_id(name)`` names."""
        ...


@dataclass(frozen=True, slots=True)
class LocalSchema:
    """One entry of ``schemas/ids.json`` with its file loaded."""

    schema_id: int
    name: str
    text: str
    parsed: ParsedSchema


def load_local_schemas(schema_dir: Path = DEFAULT_SCHEMA_DIR) -> dict[int, LocalSchema]:
    """Read ``ids.json`` and every schema it lists; refuse edited or inconsistent files.

    A listed fingerprint (CRC-64-AVRO of the Parsing Canonical Form, which ignores docs and
    defaults) that no longer matches its file means a released schema was changed in place, which
    would make old records undecodable: add a new file and a new id instead.
    """
    manifest_path = schema_dir / "ids.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"expected a readable JSON manifest at {manifest_path}; got {exc}"
        ) from exc
    out: dict[int, LocalSchema] = {}
    for entry in manifest["schemas"]:
        sid, name, file = int(entry["id"]), str(entry["name"]), str(entry["file"])
        if sid in out:
            raise ConfigError(f"{manifest_path}: schema id {sid} listed twice")
        # Stripped like AvroSerializer strips it, so registries that compare text (the mock) give
        # our codec and Confluent's serializer the same id.
        text = (schema_dir / file).read_text(encoding="utf-8").strip()
        raw = json.loads(text)
        if raw.get("name") != name or raw.get("namespace") != NAMESPACE:
            raise ConfigError(
                f"{file}: expected record {NAMESPACE}.{name}; "
                f"got {raw.get('namespace')}.{raw.get('name')}"
            )
        got_fp = fingerprint(to_parsing_canonical_form(raw), "CRC-64-AVRO")
        if got_fp != entry["fingerprint"]:
            raise ConfigError(
                f"{file}: fingerprint {got_fp} differs from ids.json's {entry['fingerprint']} "
                f"for id {sid}; never edit a released schema: add a new file and a new id"
            )
        out[sid] = LocalSchema(sid, name, text, _parse(raw))
    return out


def _newest_by_name(schemas: dict[int, LocalSchema]) -> dict[str, LocalSchema]:
    newest: dict[str, LocalSchema] = {}
    for sid in sorted(schemas):
        newest[schemas[sid].name] = schemas[sid]
    return newest


class InProcessRegistry:
    """Ids fixed by ``schemas/ids.json``: the newest id of a name writes; every listed id reads."""

    def __init__(self, schema_dir: Path = DEFAULT_SCHEMA_DIR) -> None:
        self._by_id = load_local_schemas(schema_dir)
        self._newest = _newest_by_name(self._by_id)
        self._resolved: dict[int, RegisteredSchema] = {}
        for sid, local in self._by_id.items():
            newest = self._newest[local.name]
            reader = None if newest.schema_id == sid else newest.parsed
            self._resolved[sid] = RegisteredSchema(sid, local.name, local.parsed, reader)

    @property
    def names(self) -> tuple[str, ...]:
        """Short names of every record this registry can write, in id order."""
        return tuple(s.name for s in sorted(self._newest.values(), key=lambda s: s.schema_id))

    def writer_id(self, name: str) -> int:
        return self._newest_of(name).schema_id

    def writer_schema(self, name: str) -> ParsedSchema:
        return self._newest_of(name).parsed

    def resolve(self, schema_id: int) -> RegisteredSchema:
        try:
            return self._resolved[schema_id]
        except KeyError:
            known = sorted(self._resolved)
            raise UnknownSchemaError(f"expected a schema id in {known}; got {schema_id}") from None

    def _newest_of(self, name: str) -> LocalSchema:
        try:
            return self._newest[name]
        except KeyError:
            raise UnknownSchemaError(
                f"expected a schema name in {sorted(self._newest)}; got {name!r}"
            ) from None


class ConfluentRegistry:
    """A Confluent-compatible registry server; subjects follow the RecordNameStrategy.

    Writer ids are obtained once per name (registered when ``auto_register``, else looked up) and
    cached, as are resolved ids, so the hot path never waits on the server after warm-up.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        schema_dir: Path = DEFAULT_SCHEMA_DIR,
        *,
        auto_register: bool = True,
    ) -> None:
        self._client = client
        self._auto_register = auto_register
        self._newest = _newest_by_name(load_local_schemas(schema_dir))
        self._writer_ids: dict[str, int] = {}
        self._resolved: dict[int, RegisteredSchema] = {}

    @classmethod
    def from_url(cls, url: str, schema_dir: Path = DEFAULT_SCHEMA_DIR) -> ConfluentRegistry:
        """``http(s)://host:port`` for a server, ``mock://name`` for the client's in-memory mock."""
        return cls(SchemaRegistryClient.new_client({"url": url}), schema_dir)

    @staticmethod
    def subject(name: str) -> str:
        """RecordNameStrategy subject of a short record name."""
        return f"{NAMESPACE}.{name}"

    def writer_id(self, name: str) -> int:
        cached = self._writer_ids.get(name)
        if cached is not None:
            return cached
        local = self._local(name)
        schema = Schema(local.text, "AVRO")
        try:
            if self._auto_register:
                sid = self._client.register_schema(self.subject(name), schema)
            else:
                found = self._client.lookup_schema(self.subject(name), schema)
                if found.schema_id is None:
                    raise UnknownSchemaError(f"registry returned no id for {self.subject(name)}")
                sid = found.schema_id
        except SchemaRegistryError as exc:
            raise _translate(exc, f"subject {self.subject(name)}") from exc
        self._writer_ids[name] = sid
        self._resolved.setdefault(sid, RegisteredSchema(sid, name, local.parsed, None))
        return sid

    def writer_schema(self, name: str) -> ParsedSchema:
        return self._local(name).parsed

    def resolve(self, schema_id: int) -> RegisteredSchema:
        cached = self._resolved.get(schema_id)
        if cached is not None:
            return cached
        try:
            schema = self._client.get_schema(schema_id)
        except SchemaRegistryError as exc:
            raise _translate(exc, f"schema id {schema_id}") from exc
        if schema.schema_str is None:
            raise UnknownSchemaError(f"registry returned no schema text for id {schema_id}")
        raw = json.loads(schema.schema_str)
        name = str(raw.get("name", "")).rsplit(".", 1)[-1]
        writer = _parse(raw)
        newest = self._newest.get(name)
        same = newest is not None and newest.parsed == writer
        reader = None if newest is None or same else newest.parsed
        resolved = RegisteredSchema(schema_id, name, writer, reader)
        self._resolved[schema_id] = resolved
        return resolved

    def _local(self, name: str) -> LocalSchema:
        try:
            return self._newest[name]
        except KeyError:
            raise UnknownSchemaError(
                f"expected a schema name in {sorted(self._newest)}; got {name!r}"
            ) from None


def _parse(raw: dict[str, Any]) -> ParsedSchema:
    # A fresh named_schemas per file: every schema file defines its own enums (e.g. Tier).
    return cast(ParsedSchema, parse_schema(raw, named_schemas={}))


def _translate(exc: SchemaRegistryError, what: str) -> KVCompassError:
    if exc.http_status_code == 404:
        return UnknownSchemaError(f"registry does not know {what}: {exc.error_message}")
    return RegistryUnavailableError(f"registry failed on {what}: {exc}")


def registry_from_url(url: str | None, schema_dir: Path = DEFAULT_SCHEMA_DIR) -> SchemaRegistry:
    """The adapter a process configuration names: no URL → in-process, else Confluent."""
    if not url:
        return InProcessRegistry(schema_dir)
    return ConfluentRegistry.from_url(url, schema_dir)
