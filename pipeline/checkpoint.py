"""Checkpoints of a shard's maintenance state: bounded recovery (issue 16, item 1).

Owns the snapshot of one ``MaintenanceUnit`` (every table's live keys and values, its epochs,
the shard's sequence number and the ``index-ops`` offset it covers), its wire form on the
compacted ``index-snapshots`` topic (chunks + manifest), choosing the latest *complete*
checkpoint among the records of a partition, restoring a unit from it, and ``Checkpointer``,
the shell side that writes one every ``checkpoint_period_ms``.

Wire format (topic ``index-snapshots``, partition = shard, Avro ids 12 and 13, schemas/):

- payload: for each table in order, ``n_keys`` keys then ``n_keys`` values, each ``<u8``
  (unsigned 64-bit little-endian); ``n_keys`` and the epoch per table are in the manifest.
- ``ShardSnapshotChunk`` (key ``b"C" + >I shard + >Q snapshot_id + >I index``): payload bytes
  ``[index * chunk_bytes, (index + 1) * chunk_bytes)``. Keys are distinct per snapshot, so a
  checkpoint being written never overwrites a chunk of the one a manifest names.
- ``ShardSnapshotManifest`` (key ``b"M" + >I shard``): produced only after every chunk was
  delivered; names the snapshot id, chunk count, payload length and SHA-256. Compaction keeps
  the latest one. The previous checkpoint's chunks are tombstoned only after the new manifest
  was delivered, so some complete checkpoint is on the topic at every instant.

A reader (``latest_complete``) takes manifests newest first and uses the first whose chunks are
all present with the right length and digest; a half-written or damaged checkpoint is skipped.

Must not: decide when a unit is rebuilt (``pipeline.shell``) or apply ops
(``kvcompass.maintenance``).
"""

from __future__ import annotations

import hashlib
import logging
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.maintenance import MaintenanceUnit, PatchScan
from pipeline.delivery import Delivery, DeliveryError
from wire.codec import AvroCodec

log = logging.getLogger(__name__)

CHUNK_TAG, MANIFEST_TAG = b"C", b"M"
_CHUNK_KEY = struct.Struct(">cIQI")
_MANIFEST_KEY = struct.Struct(">cI")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One shard's maintenance state reflecting exactly ``index-ops[shard][0, covered_offset)``."""

    shard: int
    snapshot_id: int
    covered_offset: int
    seq: int
    created_ms: int
    epochs: tuple[int, ...]
    keys: tuple[NDArray[np.uint64], ...]
    values: tuple[NDArray[np.uint64], ...]
    n_chunks: int = 0
    """Chunks it was read from (0: not read from the topic)."""

    @property
    def entries(self) -> int:
        return int(sum(k.size for k in self.keys))


@dataclass(frozen=True, slots=True)
class Encoded:
    """A snapshot as records: chunk (key, record) pairs in order, then the manifest's."""

    chunks: list[tuple[bytes, dict[str, Any]]]
    manifest: tuple[bytes, dict[str, Any]]


def chunk_key(shard: int, snapshot_id: int, index: int) -> bytes:
    return _CHUNK_KEY.pack(CHUNK_TAG, shard, snapshot_id, index)


def manifest_key(shard: int) -> bytes:
    return _MANIFEST_KEY.pack(MANIFEST_TAG, shard)


def snapshot_of(unit: MaintenanceUnit, snapshot_id: int, now_ms: int) -> Snapshot:
    """The unit's state now (between batches: it reflects exactly ``unit.next_offset``)."""
    items = [t.items() for t in unit.state.tables]
    return Snapshot(
        shard=unit.shard,
        snapshot_id=snapshot_id,
        covered_offset=unit.next_offset,
        seq=unit.state.seq,
        created_ms=now_ms,
        epochs=tuple(t.epoch for t in unit.state.tables),
        keys=tuple(k for k, _ in items),
        values=tuple(v for _, v in items),
    )


def encode(snap: Snapshot, chunk_bytes: int) -> Encoded:
    """Chunk records (each ``data`` at most ``chunk_bytes``) and the manifest naming them."""
    if chunk_bytes < 1:
        raise InvalidInputError(f"chunk_bytes: expected >= 1; got {chunk_bytes}")
    parts: list[bytes] = []
    for k, v in zip(snap.keys, snap.values, strict=True):
        parts.append(k.astype("<u8").tobytes())
        parts.append(v.astype("<u8").tobytes())
    payload = b"".join(parts)
    n_chunks = max(1, -(-len(payload) // chunk_bytes))
    chunks = [
        (
            chunk_key(snap.shard, snap.snapshot_id, i),
            {
                "shard": snap.shard,
                "snapshot_id": snap.snapshot_id,
                "index": i,
                "data": payload[i * chunk_bytes : (i + 1) * chunk_bytes],
            },
        )
        for i in range(n_chunks)
    ]
    manifest = {
        "shard": snap.shard,
        "snapshot_id": snap.snapshot_id,
        "covered_offset": snap.covered_offset,
        "seq": snap.seq,
        "created_ms": snap.created_ms,
        "n_chunks": n_chunks,
        "total_bytes": len(payload),
        "sha256": hashlib.sha256(payload).digest(),
        "tables": [
            {"table": t, "epoch": e, "n_keys": int(k.size)}
            for t, (e, k) in enumerate(zip(snap.epochs, snap.keys, strict=True))
        ],
    }
    return Encoded(chunks, (manifest_key(snap.shard), manifest))


def decode(manifest: dict[str, Any], chunks: dict[int, bytes]) -> Snapshot | None:
    """The snapshot a manifest names, from its chunks by index; None if any is missing or the
    payload's length, digest or table sizes do not match (never a partial state)."""
    try:
        payload = b"".join(chunks[i] for i in range(int(manifest["n_chunks"])))
    except KeyError:
        return None
    if len(payload) != manifest["total_bytes"]:
        return None
    if hashlib.sha256(payload).digest() != manifest["sha256"]:
        return None
    sizes = [int(t["n_keys"]) for t in manifest["tables"]]
    if 16 * sum(sizes) != len(payload):
        return None
    arr = np.frombuffer(payload, dtype="<u8").astype(np.uint64)
    keys: list[NDArray[np.uint64]] = []
    values: list[NDArray[np.uint64]] = []
    pos = 0
    for n in sizes:
        keys.append(arr[pos : pos + n])
        values.append(arr[pos + n : pos + 2 * n])
        pos += 2 * n
    return Snapshot(
        shard=int(manifest["shard"]),
        snapshot_id=int(manifest["snapshot_id"]),
        covered_offset=int(manifest["covered_offset"]),
        seq=int(manifest["seq"]),
        created_ms=int(manifest["created_ms"]),
        epochs=tuple(int(t["epoch"]) for t in manifest["tables"]),
        keys=tuple(keys),
        values=tuple(values),
        n_chunks=int(manifest["n_chunks"]),
    )


def latest_complete(
    records: Sequence[tuple[str, dict[str, Any] | None, bytes]],
) -> tuple[Snapshot | None, list[bytes]]:
    """The newest complete checkpoint among one partition's records in offset order
    (record name, decoded record or None for a tombstone, key), and the keys of live chunks of
    every other snapshot (half-written or superseded: the next checkpoint tombstones them)."""
    manifests: list[dict[str, Any]] = []
    chunks: dict[bytes, tuple[int, int, bytes]] = {}
    """Live chunks by record key -> (snapshot id, index, data)."""
    for name, rec, key in records:
        if rec is None:
            chunks.pop(key, None)
        elif name == "ShardSnapshotManifest":
            manifests.append(rec)
        elif name == "ShardSnapshotChunk":
            chunks[key] = (int(rec["snapshot_id"]), int(rec["index"]), bytes(rec["data"]))
    found: Snapshot | None = None
    for m in reversed(manifests):
        sid = int(m["snapshot_id"])
        found = decode(m, {i: d for s, i, d in chunks.values() if s == sid})
        if found is not None:
            break
    keep = -1 if found is None else found.snapshot_id
    stale = [k for k, (s, i, _) in sorted(chunks.items(), key=lambda kv: kv[1][:2]) if s != keep]
    return found, stale


def read_records(
    codec: AvroCodec, pairs: Sequence[tuple[bytes | None, bytes | None]]
) -> tuple[Snapshot | None, list[bytes]]:
    """``latest_complete`` of one partition's (key, value) records; a record that does not
    decode is skipped (a checkpoint missing a chunk is not used, never half-used)."""
    records: list[tuple[str, dict[str, Any] | None, bytes]] = []
    for key, value in pairs:
        if key is None:
            continue
        if value is None:
            records.append(("", None, key))
            continue
        try:
            name, rec = codec.decode(value)
        except (InvalidInputError, KeyError, ValueError):
            continue
        records.append((name, rec, key))
    return latest_complete(records)


def restore(unit: MaintenanceUnit, snap: Snapshot, scan: PatchScan) -> None:
    """Load ``snap`` into a fresh ``unit`` (its tables must be empty); ``scan`` learns the
    snapshot's epochs and seq, so the recovery's fresh epoch and seqs go above them too."""
    if snap.shard != unit.shard or len(snap.keys) != len(unit.state.tables):
        raise InvalidInputError(
            f"snapshot: expected shard {unit.shard} with {len(unit.state.tables)} tables; got "
            f"shard {snap.shard} with {len(snap.keys)}"
        )
    for t, (tab, k, v) in enumerate(zip(unit.state.tables, snap.keys, snap.values, strict=True)):
        if k.size:
            tab.update(k, np.zeros_like(k), v)
        scan.max_epoch[t] = max(scan.max_epoch.get(t, -1), snap.epochs[t])
    scan.last_seq = max(scan.last_seq, snap.seq)
    unit.next_offset = snap.covered_offset


class Checkpointer:
    """Writes each shard's checkpoint every ``period_ms`` (shell side; one per process).

    ``write`` produces the chunks, awaits their delivery, produces the manifest, awaits it,
    then tombstones the previous checkpoint's chunks (their delivery is awaited with the rest
    of the take's output). It runs between two batches of the shard, so the state reflects
    exactly the unit's ``next_offset``.
    """

    def __init__(
        self, producer: Delivery, codec: AvroCodec, topic: str, period_ms: int, chunk_bytes: int
    ) -> None:
        self.producer = producer
        self.codec = codec
        self.topic = topic
        self.period_ms = period_ms
        self.chunk_bytes = chunk_bytes
        self._last_ms: dict[int, int] = {}
        self._last_id: dict[int, int] = {}
        self._retire: dict[int, list[bytes]] = {}
        self.written = 0
        self.last_write_s = 0.0
        self.last_bytes = 0

    def read(
        self, pairs: Sequence[tuple[bytes | None, bytes | None]]
    ) -> tuple[Snapshot | None, list[bytes]]:
        """``read_records`` with this writer's codec."""
        return read_records(self.codec, pairs)

    def start(self, shard: int, now_ms: int, snap: Snapshot | None, stale: list[bytes]) -> None:
        """A unit of ``shard`` was (re)built now from ``snap`` (None: from scratch)."""
        self._last_ms[shard] = now_ms
        retire = list(stale)
        if snap is not None:
            self._last_id[shard] = max(self._last_id.get(shard, 0), snap.snapshot_id)
            retire += [chunk_key(shard, snap.snapshot_id, i) for i in range(snap.n_chunks)]
        self._retire[shard] = retire

    def due(self, shard: int, now_ms: int) -> bool:
        return now_ms - self._last_ms.get(shard, now_ms) >= self.period_ms

    def write_now(self, unit: MaintenanceUnit, now_ms: int, timeout_s: float) -> Snapshot:
        """``write`` without an event loop (a graceful stop, after the agents ended): the same
        records in the same order, each step flushed and checked; raises ``DeliveryError``
        (nothing of the new checkpoint is trusted: the previous one stays complete)."""
        t0 = time.perf_counter()
        shard = unit.shard
        sid = max(now_ms, self._last_id.get(shard, 0) + 1)
        snap = snapshot_of(unit, sid, now_ms)
        enc = encode(snap, self.chunk_bytes)
        start = self.producer.mark()
        for key, rec in enc.chunks:
            self.producer.produce(self.topic, self.codec.encode("ShardSnapshotChunk", rec), key,
                                  shard)  # fmt: skip
        self._flushed(start, timeout_s - (time.perf_counter() - t0))
        key, rec = enc.manifest
        self.producer.produce(self.topic, self.codec.encode("ShardSnapshotManifest", rec), key,
                              shard)  # fmt: skip
        self._flushed(start, timeout_s - (time.perf_counter() - t0))
        for old in self._retire.get(shard, []):
            self.producer.produce(self.topic, None, old, shard)
        self.producer.flush(max(0.1, timeout_s - (time.perf_counter() - t0)))
        self._retire[shard] = [k for k, _ in enc.chunks]
        self._last_ms[shard] = now_ms
        self._last_id[shard] = sid
        self.written += 1
        log.info("shard %d: final checkpoint: %d entries, covers index-ops < %d",
                 shard, snap.entries, snap.covered_offset)  # fmt: skip
        return snap

    def _flushed(self, start: dict[tuple[str, int], int], timeout_s: float) -> None:
        target = self.producer.mark()
        left = self.producer.flush(max(0.1, timeout_s))
        done, error = self.producer.window_state(target, start)
        if error is not None or left or not done:
            raise DeliveryError(error or f"{left} records not delivered within the time left")

    async def write(self, unit: MaintenanceUnit, now_ms: int) -> Snapshot:
        t0 = time.perf_counter()
        shard = unit.shard
        sid = max(now_ms, self._last_id.get(shard, 0) + 1)
        snap = snapshot_of(unit, sid, now_ms)
        enc = encode(snap, self.chunk_bytes)
        start = self.producer.mark()
        for key, rec in enc.chunks:
            value = self.codec.encode("ShardSnapshotChunk", rec)
            self.producer.produce(self.topic, value, key, shard)
        await self.producer.delivered_up_to(self.producer.mark(), since=start)
        key, rec = enc.manifest
        self.producer.produce(self.topic, self.codec.encode("ShardSnapshotManifest", rec), key,
                              shard)  # fmt: skip
        await self.producer.delivered_up_to(self.producer.mark(), since=start)
        for old in self._retire.get(shard, []):
            self.producer.produce(self.topic, None, old, shard)
        self._retire[shard] = [k for k, _ in enc.chunks]
        self._last_ms[shard] = now_ms
        self._last_id[shard] = sid
        self.written += 1
        self.last_write_s = time.perf_counter() - t0
        self.last_bytes = int(rec["total_bytes"])
        log.info("shard %d checkpointed: %d entries, %d bytes in %d chunks, covers index-ops < "
                 "%d, %.3f s", shard, snap.entries, self.last_bytes, len(enc.chunks),
                 snap.covered_offset, self.last_write_s)  # fmt: skip
        return snap
