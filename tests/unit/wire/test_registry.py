"""Schemas and the registry port: every schema parses and is documented, ids are stable,
edited schemas are refused, old ids decode into the newest schema, and the Confluent adapter
works against the client's in-memory mock."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro import parse_schema

from kvcompass.errors import ConfigError
from kvcompass.types import Tier
from wire.codec import AvroCodec, PatchKind
from wire.registry import (
    DEFAULT_SCHEMA_DIR,
    ConfluentRegistry,
    InProcessRegistry,
    UnknownSchemaError,
    load_local_schemas,
    registry_from_url,
)

EXPECTED_IDS = {
    "KvEvent": 11,  # id 1 still reads
    "IndexOp": 2,
    "IndexPatch": 16,  # id 3 still reads
    "QueueVector": 14,  # ids 4 and 10 still read
    "MigrationRequest": 5,
    "RoutingDecision": 6,
    "DeadLetter": 9,  # id 7 (unbounded raw) still reads
    "IndexOpBatch": 15,  # id 8 still reads
    "ShardSnapshotChunk": 12,
    "ShardSnapshotManifest": 13,
}


def _raw_schemas() -> dict[str, dict[str, Any]]:
    manifest = json.loads((DEFAULT_SCHEMA_DIR / "ids.json").read_text())
    return {
        e["name"]: json.loads((DEFAULT_SCHEMA_DIR / e["file"]).read_text())
        for e in manifest["schemas"]
    }


def _walk_named(schema: Any) -> list[dict[str, Any]]:
    """Every record and enum definition inside a schema, nested ones included."""
    found: list[dict[str, Any]] = []
    if isinstance(schema, list):
        for branch in schema:
            found += _walk_named(branch)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum"):
            found.append(schema)
        for f in schema.get("fields", []):
            found += _walk_named(f["type"])
        for key in ("items", "values"):
            if key in schema:
                found += _walk_named(schema[key])
    return found


def test_every_schema_file_is_listed__schema_dir() -> None:
    listed = {
        e["file"] for e in json.loads((DEFAULT_SCHEMA_DIR / "ids.json").read_text())["schemas"]
    }
    assert listed == {p.name for p in DEFAULT_SCHEMA_DIR.glob("*.avsc")}


def test_ids_are_the_documented_ones__manifest() -> None:
    registry = InProcessRegistry()
    assert {name: registry.writer_id(name) for name in registry.names} == EXPECTED_IDS


@pytest.mark.parametrize("name", sorted(EXPECTED_IDS))
def test_schema_parses_and_documents_everything__every_schema(name: str) -> None:
    raw = _raw_schemas()[name]
    parse_schema(raw, named_schemas={})
    assert raw["namespace"] == "io.kvcompass"
    for named in _walk_named(raw):
        assert named.get("doc"), f"{named['name']} has no doc"
        for f in named.get("fields", []):
            assert f.get("doc"), f"{named['name']}.{f['name']} has no doc"


def test_tier_enum_matches_core__every_schema() -> None:
    tiers = [n for raw in _raw_schemas().values() for n in _walk_named(raw) if n["name"] == "Tier"]
    assert len(tiers) >= 4
    for tier in tiers:
        assert tier["symbols"] == [t.name for t in Tier]


def test_patch_kind_enum_matches_codec__index_patch() -> None:
    kinds = [n for n in _walk_named(_raw_schemas()["IndexPatch"]) if n["name"] == "PatchKind"]
    assert kinds[0]["symbols"] == [k.name for k in PatchKind]


def test_unknown_id_and_name_raise__in_process() -> None:
    registry = InProcessRegistry()
    with pytest.raises(UnknownSchemaError, match="got 99"):
        registry.resolve(99)
    with pytest.raises(UnknownSchemaError, match="'Nope'"):
        registry.writer_id("Nope")


def _copy_schemas(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    shutil.copytree(DEFAULT_SCHEMA_DIR, target, ignore=shutil.ignore_patterns("*.md"))
    return target


def test_edited_schema_is_refused__fingerprint_mismatch(tmp_path: Path) -> None:
    schema_dir = _copy_schemas(tmp_path)
    raw = json.loads((schema_dir / "queue_vector.avsc").read_text())
    raw["fields"].insert(1, {"name": "extra", "type": "int", "doc": "x"})
    (schema_dir / "queue_vector.avsc").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="never edit a released schema"):
        load_local_schemas(schema_dir)


def test_doc_edits_are_allowed__fingerprint_ignores_docs(tmp_path: Path) -> None:
    schema_dir = _copy_schemas(tmp_path)
    raw = json.loads((schema_dir / "queue_vector.avsc").read_text())
    raw["doc"] = "reworded"
    (schema_dir / "queue_vector.avsc").write_text(json.dumps(raw))
    assert load_local_schemas(schema_dir)[4].name == "QueueVector"


def test_old_id_decodes_into_newest_schema__backward_evolution(tmp_path: Path) -> None:
    from fastavro.schema import fingerprint, to_parsing_canonical_form

    schema_dir = _copy_schemas(tmp_path)
    old = json.loads((schema_dir / "queue_vector.v2.avsc").read_text())
    new = json.loads(json.dumps(old))
    new["fields"].append({"name": "unit", "type": "string", "default": "ms", "doc": "Unit."})
    (schema_dir / "queue_vector.test.avsc").write_text(json.dumps(new))
    manifest = json.loads((schema_dir / "ids.json").read_text())
    fp = fingerprint(to_parsing_canonical_form(new), "CRC-64-AVRO")
    next_id = max(e["id"] for e in manifest["schemas"]) + 1
    manifest["schemas"].append({"id": next_id, "name": "QueueVector",
                                "file": "queue_vector.test.avsc", "fingerprint": fp})  # fmt: skip
    (schema_dir / "ids.json").write_text(json.dumps(manifest))
    record = {"region_id": 1, "worker_ids": [3], "queue_ms": [2.5], "seq": 1, "timestamp_ms": 5}

    old_bytes = AvroCodec(InProcessRegistry(DEFAULT_SCHEMA_DIR)).encode("QueueVector", record)
    codec = AvroCodec(InProcessRegistry(schema_dir))
    assert old_bytes[1:5] == InProcessRegistry().writer_id("QueueVector").to_bytes(4, "big")
    v2_defaults = {"bridged_worker_ids": [], "cache_unknown_worker_ids": []}
    assert codec.decode(old_bytes) == ("QueueVector", {**record, **v2_defaults, "unit": "ms"})
    new_bytes = codec.encode("QueueVector", {**record, "unit": "s"})
    assert new_bytes[1:5] == next_id.to_bytes(4, "big")


def _mock_client() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})


def test_writer_id_registers_once_and_resolves__confluent_mock() -> None:
    client = _mock_client()
    registry = ConfluentRegistry(client)
    sid = registry.writer_id("IndexPatch")
    assert registry.writer_id("IndexPatch") == sid
    assert client.get_latest_version("io.kvcompass.IndexPatch").schema_id == sid
    fresh = ConfluentRegistry(client)  # a second process: resolves the id from the server
    resolved = fresh.resolve(sid)
    assert resolved.name == "IndexPatch"
    assert resolved.reader is None


def test_unknown_id_raises__confluent_mock() -> None:
    with pytest.raises(UnknownSchemaError, match="schema id 4242"):
        ConfluentRegistry(_mock_client()).resolve(4242)


def test_lookup_without_registering_raises__confluent_mock_auto_register_off() -> None:
    registry = ConfluentRegistry(_mock_client(), auto_register=False)
    with pytest.raises(UnknownSchemaError):
        registry.writer_id("KvEvent")


def test_url_selects_adapter__registry_from_url() -> None:
    assert isinstance(registry_from_url(None), InProcessRegistry)
    assert isinstance(registry_from_url(""), InProcessRegistry)
    assert isinstance(registry_from_url(f"mock://{uuid.uuid4().hex}"), ConfluentRegistry)
