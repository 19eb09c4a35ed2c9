"""Applying ``index-patches`` records to an ``IndexView`` (architecture §5, §7), without Kafka.

``PatchApplier`` (no Kafka) groups a partition's records into one
maintenance call's batch (same table, epoch and seq: the ``Reassembler`` rebuilds the
``ShardPatch``), applies each batch in one ``IndexView.apply`` (the per-shard sequencer drops stale
and duplicate seqs; a new epoch fills a pending view that is swapped in on its COMMIT), and records
progress (last seq, next offset to read) in the view files' headers. A batch carrying a HEADER is
applied only once complete (it always ends with its COMMIT), so a served view never shows half a
re-seeded epoch; other batches are applied when the partition has nothing more to read.
``wire.patch_follower.PatchFollower`` is the one consumer that feeds it (the edge's, and every
tool's and test's).

Must not: write to Kafka, or hold index logic (``kvcompass.index_view`` does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvcompass.errors import InvalidInputError
from kvcompass.index_view import IndexView, Offer
from kvcompass.lag import LagHistogram
from kvcompass.ludo import LudoView, PatchKind
from kvcompass.patch_stream import PatchRecord, Reassembler
from wire.codec import AvroCodec, DecodeError
from wire.patches import decode_value
from wire.view_files import ViewStore

log = logging.getLogger(__name__)


@dataclass
class SyncStats:
    """Counters of one applier (the view side's metrics)."""

    records: int = 0
    tombstones: int = 0
    undecodable: int = 0
    applied: int = 0
    stale: int = 0
    other_epoch: int = 0
    groups: dict[int, int] = field(default_factory=dict)


class PatchApplier:
    """Index-patch records in, view updates out; one per view (all partitions)."""

    def __init__(self, view: IndexView, store: ViewStore | None, codec: AvroCodec,
                 schema_id: int) -> None:  # fmt: skip
        self.view = view
        self.store = store
        self.codec = codec
        self.schema_id = schema_id
        self.reassembler = Reassembler(view.params_for)
        self.stats = SyncStats()
        self.next_offset: dict[int, int] = {}
        self._buffer: dict[int, list[tuple[int, PatchRecord]]] = {}
        self._bad_records = 0
        self._times: dict[int, tuple[int, int]] = {}
        self.refused: list[tuple[int, int, str]] = []
        """The latest records skipped as inapplicable: (partition, offset, why)."""
        self.marks = np.full(view.n_shards, -np.inf)
        """Per shard, this view reflects every event produced up to then (ms, the sidecars'
        clock): the newest ``source_produced_ms`` applied (each batch's oldest source event).
        Updated in place, so a decider handed the array reads it current."""
        self.event_to_view = LagHistogram()
        """ms from a source event's produce (the sidecar's clock) to its batch applied here."""
        self.patch_to_view = LagHistogram()
        """ms from a batch's produce by its maintenance unit to its apply here (the fetch hop)."""
        self.clock_ms: Callable[[], float] = lambda: time.time() * 1000.0
        self.on_apply: Callable[[int], None] | None = None
        """Called with the shard after every applied batch (latency probes)."""

    def restore(self) -> dict[int, int]:
        """Serve the committed view files; return the offset to resume each partition from."""
        if self.store is None:
            return {}
        files = self.store.restore()
        for vf in files:
            self.view.install(vf.table, vf.shard, LudoView(vf.params, vf.arrays), vf.last_seq)
        n_tables = self.view.layout.n_tables
        resume: dict[int, int] = {}
        for s in range(self.view.n_shards):
            mine = [vf for vf in files if vf.shard == s]
            if len(mine) == n_tables and all(vf.consumer_offset >= 0 for vf in mine):
                resume[s] = min(vf.consumer_offset for vf in mine)
        self.next_offset.update(resume)
        return resume

    def _decode(self, value: bytes) -> tuple[PatchRecord, int, int]:
        """(record, its maintenance unit's produce time, its oldest source event's)."""
        try:
            d = decode_value(self.schema_id, value)
            return d.record, d.timestamp_ms, d.source_produced_ms
        except DecodeError:
            name, r = self.codec.decode(value)  # another IndexPatch version, or garbage
            if name != "IndexPatch":
                raise DecodeError(f"expected an IndexPatch record; got {name}") from None
            kind = PatchKind[r["kind"]]
            rec = PatchRecord(
                r["table"], r["shard"], r["epoch"], kind, r["index"], r["seq"], r["image"]
            )
            return rec, int(r["timestamp_ms"]), int(r.get("source_produced_ms", -1))

    def feed(
        self, partition: int, offset: int, value: bytes | None, key: bytes | None = None
    ) -> None:
        """One record of ``partition`` in offset order (``value`` None: a tombstone; ``key``:
        named when the record is refused)."""
        self.next_offset[partition] = offset + 1
        self.stats.records += 1
        if value is None:
            self.stats.tombstones += 1
            return
        try:
            rec, made_ms, produced_ms = self._decode(value)
        except DecodeError:
            self._bad_records += 1
            self.stats.undecodable = self._bad_records + self.reassembler.undecodable
            return
        n_tables = self.view.layout.n_tables
        if not 0 <= rec.table < n_tables or rec.shard != partition:
            # a record no view of this layout can hold (forged, or another deployment's): one
            # such record in the compacted topic must not stop any edge from bootstrapping
            self._refuse(partition, offset, f"table {rec.table} (view has 0..{n_tables - 1}) "
                         f"or shard {rec.shard} on partition {partition}; key "
                         f"{(key or b'').hex() or '?'}")  # fmt: skip
            return
        buf = self._buffer.setdefault(partition, [])
        if buf:
            first = buf[0][1]
            if (first.table, first.epoch, first.seq) != (rec.table, rec.epoch, rec.seq):
                self._apply(partition)
                buf = self._buffer.setdefault(partition, [])
        if not buf:
            self._times[partition] = (made_ms, produced_ms)
        buf.append((offset, rec))
        if rec.kind == PatchKind.COMMIT:
            self._apply(partition)

    def idle(self) -> None:
        """Nothing more to read now: apply every open batch that has no HEADER."""
        for p, buf in list(self._buffer.items()):
            if buf and not any(r.kind == PatchKind.HEADER for _, r in buf):
                self._apply(p)

    def _refuse(self, partition: int, offset: int, why: str) -> None:
        """Skip a record the view cannot apply, counted and said once per record (its key can
        be tombstoned: ``pipeline/README.md``, "A patch no view can apply")."""
        self._bad_records += 1
        self.stats.undecodable = self._bad_records + self.reassembler.undecodable
        self.refused.append((partition, offset, why))
        del self.refused[:-16]
        log.warning("index-patches[%d]@%d skipped: %s", partition, offset, why)

    def _apply(self, partition: int) -> None:
        recs = self._buffer.pop(partition, [])
        made_ms, produced_ms = self._times.pop(partition, (-1, -1))
        out = []
        for offset, r in recs:
            try:
                out.extend(self.reassembler.feed(r))
            except (InvalidInputError, ValueError, IndexError) as exc:
                self._refuse(partition, offset, f"not a piece of any view: {exc}")
        try:
            out.extend(self.reassembler.flush())
        except (InvalidInputError, ValueError, IndexError) as exc:
            self._refuse(partition, recs[-1][0] if recs else -1, f"batch not applicable: {exc}")
        self.stats.undecodable = self._bad_records + self.reassembler.undecodable
        for sp in out:
            try:
                decision = self.view.apply(sp)
            except (InvalidInputError, ValueError, IndexError) as exc:
                self._refuse(partition, recs[-1][0] if recs else -1, f"patch refused: {exc}")
                continue
            if decision is Offer.APPLY:
                now = self.clock_ms()
                if produced_ms >= 0:
                    self.event_to_view.observe([now - produced_ms])
                    if produced_ms > self.marks[sp.shard]:
                        self.marks[sp.shard] = produced_ms
                if made_ms >= 0:
                    self.patch_to_view.observe([now - made_ms])
                self.stats.applied += 1
                self.stats.groups[sp.shard] = self.stats.groups.get(sp.shard, 0) + 1
                if self.on_apply is not None:
                    self.on_apply(sp.shard)
            elif decision is Offer.SKIP_STALE:
                self.stats.stale += 1
            else:
                self.stats.other_epoch += 1

    def resume_offset(self, partition: int) -> int:
        """Where a restarted consumer must read from: the first record not yet applied."""
        buf = self._buffer.get(partition)
        if buf:
            return buf[0][0]
        return self.next_offset.get(partition, -1)

    def save(self) -> list[Path]:
        """Write progress into the view files; return superseded files (the caller deletes)."""
        if self.store is None:
            return []
        for s in range(self.view.n_shards):
            self.store.set_progress(s, int(self.view.last_seq[s]), self.resume_offset(s))
        return self.store.superseded()
