"""Export ``kv-events`` to an Avro object container file, and read such a file back for replay.

The file is a standard Avro OCF (``fastavro.writer``; deflate codec) whose schema is the
``KvEvent`` schema of ``schemas/`` (the newest version), one record per event, in the order read
(partition by partition interleaved as consumed; per-worker order is kept because a worker's
events live on one partition). Any Avro tool can read it. Replay assigns partition 0 and the
record's position as its offset. Must not: write to Kafka.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from fastavro import reader, writer

from pipeline.replay import SourceRecord
from wire.codec import AvroCodec, worker_key_mismatch
from wire.registry import InProcessRegistry


def export_events(records: Iterable[SourceRecord], path: Path, codec: AvroCodec) -> int:
    """Decode ``KvEvent`` wire records and write them to ``path``; return how many were written.

    Records that do not decode as KvEvent, or whose Kafka key is not their worker's, are skipped
    (they are dead letters' business).
    """
    schema = InProcessRegistry().writer_schema("KvEvent")
    written = 0

    def events() -> Iterator[dict[str, object]]:
        nonlocal written
        for rec in records:
            try:
                name, ev = codec.decode(rec.value or b"")
            except ValueError:
                continue
            if name == "KvEvent" and worker_key_mismatch(rec.key, int(ev["worker_id"])) is None:
                written += 1
                yield ev

    with Path(path).open("wb") as fh:
        writer(fh, schema, events(), codec="deflate")
    return written


def read_export(path: Path) -> Iterator[SourceRecord]:
    """Records of an exported file, as replay input (partition 0, offset = position)."""
    with Path(path).open("rb") as fh:
        for i, ev in enumerate(reader(fh)):
            if isinstance(ev, dict):
                yield SourceRecord(0, i, None, ev)
