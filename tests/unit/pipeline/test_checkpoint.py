"""Checkpoints without a broker: encode/decode round trip through the Avro codec, chunking,
manifest completeness (a half-written or damaged checkpoint is never used), and checkpoint +
op tail == full replay."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from kvcompass.errors import InvalidInputError
from kvcompass.maintenance import MaintenanceUnit, PatchScan
from pipeline.checkpoint import (
    Snapshot,
    chunk_key,
    decode,
    encode,
    latest_complete,
    manifest_key,
    restore,
    snapshot_of,
)
from tests.kv_event_fixtures import LAYOUT
from tests.unit.kvcompass.test_maintenance import N, _batches, _truth
from wire.codec import AvroCodec
from wire.registry import InProcessRegistry

CODEC = AvroCodec(InProcessRegistry())
Record = tuple[str, dict[str, Any] | None, bytes]


def _unit(batches: list[Any], shard: int = 1) -> MaintenanceUnit:
    unit = MaintenanceUnit(LAYOUT, shard, N, initial_capacity=64)
    unit.recover([], PatchScan(), 0)
    for lo in range(0, len(batches), 50):
        unit.apply(batches[lo : lo + 50], min(lo + 50, len(batches)) - 1)
    return unit


def _wire(snap: Snapshot, chunk_bytes: int) -> list[Record]:
    """The records a checkpoint puts on the topic, through the real codec, in write order."""
    enc = encode(snap, chunk_bytes)
    out: list[Record] = []
    for key, rec in [*enc.chunks, enc.manifest]:
        name = "ShardSnapshotManifest" if key == manifest_key(snap.shard) else "ShardSnapshotChunk"
        decoded_name, decoded = CODEC.decode(CODEC.encode(name, rec))
        out.append((decoded_name, decoded, key))
    return out


def _items(unit: MaintenanceUnit, t: int) -> dict[int, int]:
    keys, vals = unit.state.tables[t].items()
    return dict(zip(keys.tolist(), vals.tolist(), strict=True))


def test_round_trip_through_chunks__small_chunk_size() -> None:
    unit = _unit(_batches(np.random.default_rng(3), 500, 1))
    snap = snapshot_of(unit, 7, 1_000)
    assert snap.entries > 100
    enc = encode(snap, 1024)
    assert len(enc.chunks) == -(-16 * snap.entries // 1024) > 1
    assert all(len(rec["data"]) <= 1024 for _, rec in enc.chunks)
    assert all(len(CODEC.encode("ShardSnapshotChunk", r)) < 1024 + 64 for _, r in enc.chunks)
    got, stale = latest_complete(_wire(snap, 1024))
    assert got is not None and stale == []
    assert (got.shard, got.snapshot_id, got.covered_offset, got.seq, got.epochs) == (
        1, 7, unit.next_offset, unit.state.seq, snap.epochs,
    )  # fmt: skip
    assert got.n_chunks == len(enc.chunks)
    for a, b in zip(got.keys + got.values, snap.keys + snap.values, strict=True):
        assert a.dtype == np.uint64 and np.array_equal(a, b)


def test_empty_state_is_one_empty_chunk__fresh_unit() -> None:
    unit = MaintenanceUnit(LAYOUT, 0, N, initial_capacity=16)
    got, _ = latest_complete(_wire(snapshot_of(unit, 1, 0), 4096))
    assert got is not None and got.entries == 0 and got.n_chunks == 1


def test_checkpoint_plus_tail_equals_full_replay__restore() -> None:
    batches = _batches(np.random.default_rng(5), 800, 1)
    head = _unit(batches[:500])
    snap, _ = latest_complete(_wire(snapshot_of(head, 1, 0), 2048))
    assert snap is not None and snap.covered_offset == 500
    fresh = MaintenanceUnit(LAYOUT, 1, N, initial_capacity=64)
    scan = PatchScan(last_seq=3, max_epoch={0: 0})
    restore(fresh, snap, scan)
    assert fresh.next_offset == 500 and scan.last_seq == max(3, head.state.seq)
    tail = list(enumerate(batches[500:], start=500))
    step = fresh.recover(tail, scan, 800)
    truth = _truth(batches).shards[1]
    for t in range(LAYOUT.n_tables):
        keys, vals = truth.tables[t].items()
        assert _items(fresh, t) == dict(zip(keys.tolist(), vals.tolist(), strict=True))
        assert fresh.state.tables[t].epoch > snap.epochs[t]  # published above the checkpoint's
    assert min(p.seq for p in step.patches) > head.state.seq


def test_newest_incomplete_checkpoint_falls_back_to_older_complete__missing_chunk() -> None:
    batches = _batches(np.random.default_rng(9), 600, 1)
    old = _wire(snapshot_of(_unit(batches[:300]), 10, 0), 1024)
    new = _wire(snapshot_of(_unit(batches), 11, 0), 1024)
    chunks_new = [r for r in new if r[0] == "ShardSnapshotChunk"]
    assert len(chunks_new) > 2
    half_written = [*old, *chunks_new[:-1], new[-1]]  # a chunk lost, the manifest there
    got, stale = latest_complete(half_written)
    assert got is not None and got.snapshot_id == 10 and got.covered_offset == 300
    assert stale == [r[2] for r in chunks_new[:-1]]
    got, _ = latest_complete([*old, *new])
    assert got is not None and got.snapshot_id == 11 and got.covered_offset == 600


def test_damaged_or_tombstoned_chunk_is_never_used__digest() -> None:
    recs = _wire(snapshot_of(_unit(_batches(np.random.default_rng(2), 300, 1)), 4, 0), 1024)
    name, rec, key = recs[1]
    assert rec is not None
    flipped = bytes([rec["data"][0] ^ 1]) + rec["data"][1:]
    damaged = [*recs[:1], (name, {**rec, "data": flipped}, key), *recs[2:]]
    assert latest_complete(damaged)[0] is None
    tombstoned = [*recs, ("", None, key)]
    assert latest_complete(tombstoned)[0] is None
    manifest = recs[-1][1]
    assert manifest is not None
    assert decode(manifest, {0: b""}) is None  # chunks missing: not a partial state
    assert latest_complete(recs[:-1])[0] is None  # chunks without a manifest


def test_chunk_keys_differ_per_snapshot__compaction_keeps_both() -> None:
    assert chunk_key(1, 5, 0) != chunk_key(1, 6, 0) != chunk_key(2, 5, 0)
    assert len(chunk_key(1, 5, 0)) == 17 and manifest_key(1) == b"M\x00\x00\x00\x01"
    with pytest.raises(InvalidInputError, match="chunk_bytes"):
        encode(snapshot_of(MaintenanceUnit(LAYOUT, 0, N, initial_capacity=16), 1, 0), 0)


def test_replay_covers_compares_log_start_with_checkpoint_offset__retention() -> None:
    from kvcompass.maintenance import replay_covers

    assert replay_covers(0) and not replay_covers(1)  # no checkpoint: the log must start at 0
    assert replay_covers(500, 500) and replay_covers(10, 500)  # deleted what it covers: fine
    assert not replay_covers(501, 500)  # the tail after the checkpoint is gone: refuse


def test_stale_chunks_of_other_shards_keep_their_keys__no_complete_checkpoint() -> None:
    unit = _unit(_batches(np.random.default_rng(4), 200, 0), shard=0)
    snap = snapshot_of(unit, 3, 0)
    moved = dataclasses.replace(snap, shard=2)
    recs = _wire(moved, 1024)[:-1]  # chunks written, the manifest never was
    got, stale = latest_complete(recs)
    assert got is None
    assert stale == [chunk_key(2, 3, i) for i in range(len(recs))]
