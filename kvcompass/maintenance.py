"""One maintenance unit (architecture §5, §7): the per-partition state behind the maintenance agent.

Owns, for shard s: the keyed ``ShardState`` (sole writer of shard s of every table), which
``index-ops`` offsets it reflects (``next_offset``), recovery (replay the shard's op history
after its checkpoint, if any, was loaded by ``pipeline.checkpoint.restore``; then start a fresh
epoch above every epoch already on ``index-patches`` with sequence numbers past the last one
there, and retire, i.e. tombstone, every older piece), applying decoded op batches in order in
one core call per run, and which patch keys a growth into a new epoch retires.

Must not: talk to Kafka or encode records (``wire.patches``), or decide batching (the
agent's ``take``). Decisions are data: ``apply`` returns a ``Step`` the shell sends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from kvcompass.index import ShardPatch, ShardState
from kvcompass.layout import TableLayout
from kvcompass.ludo import LudoParams, LudoTable, PatchKind
from kvcompass.op_runs import Runs
from kvcompass.rechunk import OpBatch, OpKind
from kvcompass.shards import shard_of

PatchKeyTuple = tuple[int, int, int, int, int]
"""(table, shard, epoch, kind, index): the compaction key of an ``index-patches`` record."""

_KEY_LIMIT = np.uint64(1 << 63)


@dataclass
class PatchScan:
    """What reading shard s's partition of ``index-patches`` from the start tells a new unit."""

    last_seq: int = 0
    max_epoch: dict[int, int] = field(default_factory=dict)
    live: set[PatchKeyTuple] = field(default_factory=set)
    """Keys whose latest record is an image (not a tombstone)."""

    def observe(self, key: PatchKeyTuple, seq: int | None) -> None:
        """One record in offset order; ``seq`` None for a tombstone."""
        table, epoch = key[0], key[2]
        self.max_epoch[table] = max(self.max_epoch.get(table, -1), epoch)
        if seq is None:
            self.live.discard(key)
        else:
            self.live.add(key)
            self.last_seq = max(self.last_seq, seq)


@dataclass(frozen=True, slots=True)
class Step:
    """What one call produced: patches to send in order, then keys to tombstone."""

    patches: list[ShardPatch]
    retired: list[PatchKeyTuple]
    source_offset: int
    """Offset of the last op record reflected (-1: none, e.g. a recovery republish)."""


class Offsets(Enum):
    """Where a record's offset stands relative to what the unit reflects."""

    NEXT = "next"
    SEEN = "seen"  # already reflected (re-delivery after a rebalance in this process): skip
    GAP = "gap"  # records were processed elsewhere in between: rebuild the unit


def epoch_keys(table: int, shard: int, params: LudoParams) -> list[PatchKeyTuple]:
    """Every compaction key a complete epoch of ``params`` occupies."""
    e = params.epoch
    out: list[PatchKeyTuple] = [
        (table, shard, e, int(PatchKind.HEADER), 0),
        (table, shard, e, int(PatchKind.COMMIT), 0),
    ]
    out.extend((table, shard, e, int(PatchKind.BUCKET), i) for i in range(params.n_buckets))
    out.extend(
        (table, shard, e, int(PatchKind.LOCATOR_WORD), i) for i in range(params.n_locator_words)
    )
    return out


def replay_covers(log_start_offset: int, restored_next_offset: int = 0) -> bool:
    """Whether replaying ``index-ops`` from ``log_start_offset`` rebuilds the shard exactly.

    Records below the log start are gone (retention, ``delete_records``), so what recovery
    starts from must already reflect them: a checkpoint of the offsets below
    ``restored_next_offset`` (its ``covered_offset``; 0: none, recovery replays from scratch and
    needs the log to start at 0). A replay that does not cover them would publish a partial
    index as a fresh epoch.
    """
    return log_start_offset <= restored_next_offset


def _start_epoch(table: LudoTable, epoch: int) -> None:
    table.rebuild(epoch)


class MaintenanceUnit:
    """Shard ``shard``'s maintenance state; build with ``recover``."""

    def __init__(
        self,
        layout: TableLayout,
        shard: int,
        n_shards: int,
        *,
        fp_bits: int = 8,
        initial_capacity: int = 1 << 12,
        seed: int = 0,
    ) -> None:
        self.layout = layout
        self.shard = shard
        self.n_shards = n_shards
        self.state = ShardState(
            layout, shard, n_shards, fp_bits=fp_bits, initial_capacity=initial_capacity, seed=seed
        )
        self.next_offset = 0
        self.reflected: dict[int, int] = {}
        """After a rebuild from ``kv-events`` (``pipeline.heal``): per ``kv-events`` partition, the
        end offset the rebuilt state reflects; later runs whose source event lies below it are
        already in the state and are skipped (``already_reflected``). Empty otherwise."""
        self._widths = np.array([len(w) for w in layout.table_workers], dtype=np.int64)
        self._epochs: list[LudoParams] = [t.params for t in self.state.tables]

    # -- recovery ---------------------------------------------------------------------------
    def recover(
        self, history: Iterable[tuple[int, OpBatch | Runs]], scan: PatchScan, next_offset: int
    ) -> Step:
        """Rebuild from the shard's op history (offset, a run or a record's runs), then publish
        a fresh epoch; what does not pass ``check_runs`` is skipped (it was dead-lettered).

        ``next_offset`` is the first offset the agent will hand over next (the history must end
        before it). Returns the full images of the fresh epoch of every table (seq continuing
        past ``scan.last_seq``) and the tombstones of every older piece still live on the topic.
        """
        pending: list[OpBatch] = []
        for _, item in history:
            if isinstance(item, OpBatch):
                if self.check(item) is None:
                    pending.append(item)
                continue
            if pending:
                self._apply_columns(Runs.from_batches(self.shard, pending))
                pending = []
            if self.check_runs(item) is None:
                self._apply_columns(item)
        if pending:
            self._apply_columns(Runs.from_batches(self.shard, pending))
        self.state.seq = scan.last_seq
        for t, tab in enumerate(self.state.tables):
            floor = max(scan.max_epoch.get(t, -1), tab.epoch - 1) + 1
            if tab.epoch < floor:
                _start_epoch(tab, floor)
        patches = self.state.full_images()
        self._epochs = [p.batch.params for p in patches]
        self.next_offset = next_offset
        return Step(patches, sorted(scan.live), -1)

    # -- normal operation -------------------------------------------------------------------
    def position(self, offset: int) -> Offsets:
        if offset < self.next_offset:
            return Offsets.SEEN
        return Offsets.NEXT if offset == self.next_offset else Offsets.GAP

    def already_reflected(self, batch: OpBatch) -> bool:
        """Whether a rebuild from ``kv-events`` already applied ``batch``'s source event."""
        end = self.reflected.get(batch.source.partition)
        return end is not None and batch.source.offset < end

    def unreflected(self, runs: Runs) -> Runs:
        """``runs`` without those whose source event a rebuild from ``kv-events`` already
        applied (``already_reflected``, vectorised)."""
        if not self.reflected or not len(runs):
            return runs
        part = np.array([s.partition for s in runs.sources], np.int64)
        off = np.array([s.offset for s in runs.sources], np.int64)
        end = np.array([self.reflected.get(p, -1) for p in part.tolist()], np.int64)
        done = (end >= 0) & (off < end)
        if not done.any():
            return runs
        return runs.take(np.flatnonzero(~done[runs.source]).astype(np.int64))

    def check_runs(self, runs: Runs) -> str | None:
        """Why a record's ``runs`` cannot be applied by this unit (an INVALID dead letter of
        the whole record), or None; the vectorised ``check``."""
        if runs.shard != self.shard:
            return f"shard: expected {self.shard} (the partition); got {runs.shard}"
        if not len(runs):
            return None
        t = runs.table
        bad = np.flatnonzero((t < 0) | (t >= self.layout.n_tables))
        if bad.size:
            return f"table: expected 0..{self.layout.n_tables - 1}; got {int(t[bad[0]])}"
        width = self._widths[t]
        bad = np.flatnonzero((runs.field < 0) | (runs.field >= width))
        if bad.size:
            i = int(bad[0])
            return (f"field: expected 0..{int(width[i]) - 1} for table {int(t[i])}; "
                    f"got {int(runs.field[i])}")  # fmt: skip
        if ((runs.op == int(OpKind.SET)) & (runs.tier == 0)).any():
            return "tier: expected VRAM or DRAM for SET; got NONE"
        keys = runs.keys
        if keys.size and (keys >= _KEY_LIMIT).any():
            return "keys: expected 63-bit keys (< 2**63); got a larger one"
        if keys.size and (shard_of(keys, self.n_shards) != self.shard).any():
            return f"keys: expected every key % {self.n_shards} == {self.shard}"
        return None

    def check(self, batch: OpBatch) -> str | None:
        """Why ``batch`` cannot be applied by this unit (an INVALID dead letter), or None."""
        if batch.shard != self.shard:
            return f"shard: expected {self.shard} (the partition); got {batch.shard}"
        if not 0 <= batch.table < self.layout.n_tables:
            return f"table: expected 0..{self.layout.n_tables - 1}; got {batch.table}"
        width = int(self._widths[batch.table])
        if not 0 <= batch.field < width:
            return f"field: expected 0..{width - 1} for table {batch.table}; got {batch.field}"
        if batch.op is OpKind.SET and batch.code == 0:
            return "tier: expected VRAM or DRAM for SET; got NONE"
        keys = batch.keys
        if keys.size and (keys >= _KEY_LIMIT).any():
            return "keys: expected 63-bit keys (< 2**63); got a larger one"
        if keys.size and (shard_of(keys, self.n_shards) != self.shard).any():
            return f"keys: expected every key % {self.n_shards} == {self.shard}"
        return None

    def apply(self, batches: list[OpBatch], last_offset: int) -> Step:
        """Apply checked batches in order; ``last_offset`` is the offset of the last record."""
        return self.apply_runs(Runs.from_batches(self.shard, batches), last_offset)

    def apply_runs(self, runs: Runs, last_offset: int) -> Step:
        """Apply checked runs (``check_runs``) in order; ``last_offset``: the last record's."""
        patches = self._apply_columns(runs)
        self.next_offset = last_offset + 1
        retired: list[PatchKeyTuple] = []
        for p in patches:
            old = self._epochs[p.table]
            if p.batch.params.epoch != old.epoch:
                retired.extend(epoch_keys(p.table, self.shard, old))
                self._epochs[p.table] = p.batch.params
        return Step(patches, retired, last_offset)

    def _apply_columns(self, runs: Runs) -> list[ShardPatch]:
        """One core call per stretch of keyed runs between CLEAR_FIELD runs (usually one)."""
        if not len(runs):
            return []
        clear = np.flatnonzero(runs.op == int(OpKind.CLEAR_FIELD)).tolist()
        out: list[ShardPatch] = []
        key_end = np.cumsum(runs.count)
        start = 0
        for stop in [*clear, len(runs)]:
            if stop > start:
                out.extend(self._apply_keyed(runs, start, stop, key_end))
            if stop < len(runs):
                out.append(self.state.clear_field(int(runs.table[stop]), int(runs.field[stop])))
            start = stop + 1
        return out

    def _apply_keyed(self, runs: Runs, a: int, b: int, key_end: np.ndarray) -> list[ShardPatch]:
        counts = runs.count[a:b]
        k0 = int(key_end[a] - counts[0])
        keys = runs.keys[k0 : int(key_end[b - 1])]
        if keys.size == 0:
            return []
        tables = np.repeat(runs.table[a:b], counts)
        fields = np.repeat(runs.field[a:b], counts)
        codes = np.repeat(runs.code[a:b].astype(np.uint8), counts)
        return self.state.apply(tables, keys, fields, codes)

    def holders_value(self, table: int, key: int) -> int:
        """Exact packed value of ``key`` in ``table`` (ground truth for tests and tools)."""
        return int(self.state.tables[table].get(np.array([key], dtype=np.uint64))[0])
