"""Recovery benchmark: checkpoint write and restore time vs state size (no broker).

For each ``--entries`` size N, one shard's unit is built from an op history of 3 N key-ops
(SET 1.5 N keys, N of them to DRAM, REMOVE 0.5 N; runs of 64 keys, each run a random worker's,
so about 2 N live (table, key) entries, the "entries" column).
Timed, single-threaded, in this process:

- ``replay_s``: the old recovery's CPU part, applying the whole history to a fresh unit (the
  broker read of that history, which grows with time, is not included);
- ``write_s``: ``snapshot_of`` + ``encode`` + Avro encoding of every record (what a checkpoint
  costs the maintenance agent, every ``checkpoint_period_ms``);
- ``restore_s``: Avro decoding + ``latest_complete`` (SHA-256 check) + ``restore`` + the fresh
  epoch's full images (``MaintenanceUnit.recover`` with an empty tail): recovery's CPU part.

Recovery then replays only the tail since the checkpoint (at most one period of ops), plus the
broker reads (``tests/integration/test_pipeline_recovery.py`` prints the whole time).
``--json`` prints one object per size. Run as ``python -m bench.recovery`` (the script's own
directory would shadow ``pipeline``). Figures: ``pipeline/README.md`` ("Bounded recovery").
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from kvcompass.deployment import builtin_deployment
from kvcompass.layout import TableLayout
from kvcompass.maintenance import MaintenanceUnit, PatchScan
from kvcompass.rechunk import EventRef, OpBatch, OpKind
from kvcompass.types import Tier
from pipeline.checkpoint import encode, latest_complete, restore, snapshot_of
from wire.codec import AvroCodec
from wire.registry import InProcessRegistry

N_SHARDS, SHARD, RUN = 4, 1, 64


def history(layout: TableLayout, n: int, rng: np.random.Generator) -> list[OpBatch]:
    keys = rng.choice(1 << 40, size=int(1.5 * n), replace=False).astype(np.uint64)
    keys = keys * np.uint64(N_SHARDS) + np.uint64(SHARD)
    src = EventRef(0, 0, "kv-events", 0, -1, 0)
    out: list[OpBatch] = []

    def runs(ks: np.ndarray, op: OpKind, tier: Tier) -> None:
        for lo in range(0, ks.size, RUN):
            w = int(rng.integers(0, layout.n_workers))
            table, field = layout.field_of(w)
            out.append(OpBatch(SHARD, table, field, op, tier, ks[lo : lo + RUN], src))

    # one worker per run, so a key's SET, move and REMOVE may hit different tables and fields:
    # the live (table, key) entries come to about 2 n
    runs(keys, OpKind.SET, Tier.VRAM)
    runs(keys[:n], OpKind.SET, Tier.DRAM)
    runs(keys[n:], OpKind.REMOVE, Tier.NONE)
    return out


def run(entries: int, chunk_bytes: int, seed: int) -> dict[str, float]:
    dep = builtin_deployment("paper-testbed-14x3")
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    codec = AvroCodec(InProcessRegistry())
    ops = history(layout, entries, np.random.default_rng(seed))
    t0 = time.perf_counter()
    unit = MaintenanceUnit(layout, SHARD, N_SHARDS)
    unit.recover(list(enumerate(ops)), PatchScan(), len(ops))
    replay_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    enc = encode(snapshot_of(unit, 1, 0), chunk_bytes)
    wire = [codec.encode("ShardSnapshotChunk", r) for _, r in enc.chunks]
    wire.append(codec.encode("ShardSnapshotManifest", enc.manifest[1]))
    write_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    keys = [k for k, _ in enc.chunks] + [enc.manifest[0]]
    records = [(*codec.decode(v), k) for v, k in zip(wire, keys, strict=True)]
    snap, _ = latest_complete(records)
    assert snap is not None
    fresh = MaintenanceUnit(layout, SHARD, N_SHARDS)
    scan = PatchScan()
    restore(fresh, snap, scan)
    fresh.recover([], scan, snap.covered_offset)
    restore_s = time.perf_counter() - t0
    assert fresh.state.entries() == unit.state.entries()
    return {
        "entries": unit.state.entries(),
        "ops": len(ops) * RUN,
        "payload_bytes": int(enc.manifest[1]["total_bytes"]),
        "chunks": len(enc.chunks),
        "replay_s": replay_s,
        "write_s": write_s,
        "restore_s": restore_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--chunk-bytes", type=int, default=512 * 1024)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    run(1_000, a.chunk_bytes, a.seed)  # warm-up: numba kernels load outside the timings
    rows = [run(n, a.chunk_bytes, a.seed) for n in a.entries]
    if a.json:
        print(json.dumps(rows))
        return
    print(f"{'entries':>9} {'ops':>9} {'payload MB':>10} {'chunks':>6} {'replay s':>9} "
          f"{'write s':>8} {'restore s':>9}")  # fmt: skip
    for r in rows:
        print(f"{r['entries']:>9} {r['ops']:>9} {r['payload_bytes'] / 1e6:>10.1f} "
              f"{r['chunks']:>6} {r['replay_s']:>9.3f} {r['write_s']:>8.3f} "
              f"{r['restore_s']:>9.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
