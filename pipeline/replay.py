"""Offline replay: rebuild the index from ``kv-events`` with the same core, diff it, trace a key.

Owns reading a range of ``kv-events`` (offsets or times, from Kafka, or an exported Avro file),
rebuilding the keyed index in one process (``DiscoveryIndex`` shards fed by the same
``Rechunker`` and per-shard op batches the pipeline uses), comparing it with a directory of view
files (what an edge serves), and the history of one prefix key (which events registered, moved
and evicted it). Read-only: it never writes to Kafka or to view files.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kvcompass.deployment import Deployment
from kvcompass.errors import InvalidInputError
from kvcompass.event_order import EventOrder, Verdict
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.layout import FIELD_BITS, FIELD_MASK, TableLayout
from kvcompass.levels import Levels
from kvcompass.ludo import LudoView
from kvcompass.rechunk import EventRef, OpKind, Rechunker
from wire.codec import AvroCodec, worker_key_mismatch
from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf
from wire.view_files import ViewStore


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One ``kv-events`` record (from Kafka or an export file)."""

    partition: int
    offset: int
    value: bytes | None = None
    event: dict[str, Any] | None = None
    """Already decoded (export files hold records, not wire bytes)."""
    key: bytes | None = None
    """The Kafka key (checked against ``worker_id`` for records read from Kafka)."""


@dataclass(frozen=True, slots=True)
class Touch:
    """One event that changed a key's field."""

    partition: int
    offset: int
    timestamp_ms: int
    worker_id: int
    engine_seq: int
    op: str
    tier: str


@dataclass
class Replay:
    """An offline rebuild: the index, counts, and (optionally) the trace of some keys."""

    index: DiscoveryIndex
    rechunker: Rechunker
    events: int = 0
    invalid: int = 0
    key_ops: int = 0
    traced: dict[int, list[Touch]] = field(default_factory=dict)
    order: EventOrder = field(default_factory=EventOrder)
    """The live pipeline's rule (``kvcompass.event_order``): a worker's events by engine_seq."""
    late: int = 0
    """Events not applied: duplicates or out of order (the live pipeline dead-letters them)."""
    redelivered: int = 0

    def feed(self, rec: SourceRecord, codec: AvroCodec, topic: str = "kv-events") -> None:
        try:
            ev = rec.event
            if ev is None:
                name, ev = codec.decode(rec.value or b"")
                if name != "KvEvent":
                    raise InvalidInputError(f"expected KvEvent; got {name}")
                mismatch = worker_key_mismatch(rec.key, int(ev["worker_id"]))
                if mismatch is not None:
                    raise InvalidInputError(mismatch)
            src = EventRef(int(ev["worker_id"]), int(ev["engine_seq"]), topic, rec.partition,
                           rec.offset, int(ev["timestamp_ms"]))  # fmt: skip
            verdict = self.order.judge(src.worker_id, src.engine_seq, rec.partition, rec.offset)
            if verdict is not Verdict.APPLY:
                self.late += verdict is Verdict.LATE
                self.redelivered += verdict is Verdict.REDELIVERED
                return
            batches = self.rechunker.rechunk(ev, src)
        except (InvalidInputError, KeyError, ValueError):
            self.invalid += 1
            return
        self.order.accept(src.worker_id, src.engine_seq, rec.partition, rec.offset)
        self.events += 1
        for b in batches:
            shard = self.index.shards[b.shard]
            if b.op is OpKind.CLEAR_FIELD:
                shard.clear_field(b.table, b.field)
            else:
                shard.apply_field(b.table, b.field, b.code, b.keys)
                self.key_ops += int(b.keys.size)
            if self.traced:
                hit = (b.keys[:, None] == np.array(list(self.traced), np.uint64)[None, :]).any(0)
                whole = b.op is OpKind.CLEAR_FIELD
                for k, h in zip(self.traced, hit.tolist(), strict=True):
                    if h or (whole and k % self.index.n_shards == b.shard):
                        self.traced[k].append(Touch(rec.partition, rec.offset,
                                                    src.timestamp_ms, src.worker_id,
                                                    src.engine_seq, str(ev["op"]),
                                                    str(ev["tier"])))  # fmt: skip

    def holders(self, key: int) -> dict[int, int]:
        """worker -> tier code of one key, exact."""
        return {w: int(t) for w, t in self.index.holders(key).items()}


def new_replay(dep: Deployment, n_shards: int, trace: Iterable[int] = ()) -> Replay:
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    rechunker = Rechunker(layout, Levels.from_deployment(dep), dep.worker_region, n_shards)
    index = DiscoveryIndex(layout, n_shards=n_shards)
    return Replay(index, rechunker, traced={int(k): [] for k in trace})


def read_kafka(
    broker: str | PipelineConfig,
    topic: str,
    *,
    start_offset: int | None = None,
    end_offset: int | None = None,
    start_ms: int | None = None,
    end_ms: int | None = None,
    timeout_s: float = 30.0,
) -> Iterator[SourceRecord]:
    """Records of every partition of ``topic`` in [start, end) by offset or broker timestamp."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(librdkafka_conf(broker, {"group.id": "kvcompass-replay",
                                          "enable.auto.commit": False}))  # fmt: skip
    try:
        parts = sorted(c.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
        begin: dict[int, int] = {}
        ends: dict[int, int] = {}
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            ends[p] = high if end_offset is None else min(high, end_offset)
            begin[p] = max(low, start_offset or 0)
        if start_ms is not None:
            for tp in c.offsets_for_times(
                [TopicPartition(topic, p, start_ms) for p in parts], timeout=timeout_s
            ):
                begin[tp.partition] = tp.offset if tp.offset >= 0 else ends[tp.partition]
        if end_ms is not None:
            for tp in c.offsets_for_times(
                [TopicPartition(topic, p, end_ms) for p in parts], timeout=timeout_s
            ):
                if tp.offset >= 0:
                    ends[tp.partition] = min(ends[tp.partition], tp.offset)
        open_parts = {p for p in parts if ends[p] > begin[p]}
        if not open_parts:
            return
        c.assign([TopicPartition(topic, p, begin[p]) for p in sorted(open_parts)])
        deadline = time.monotonic() + timeout_s
        while open_parts and time.monotonic() < deadline:
            for m in c.consume(5000, 0.2):
                if m.error() is not None:
                    continue
                p, off = int(m.partition() or 0), int(m.offset() or 0)
                if p not in open_parts:
                    continue
                if off >= ends[p]:
                    open_parts.discard(p)
                    continue
                yield SourceRecord(p, off, m.value(), key=m.key())
                if off >= ends[p] - 1:
                    open_parts.discard(p)
        if open_parts:
            raise TimeoutError(f"replay: partitions {sorted(open_parts)} not read in {timeout_s} s")
    finally:
        c.close()


@dataclass(frozen=True, slots=True)
class Diff:
    """Index (keyed truth) vs a view directory (keyless), over the index's live keys."""

    checked: int
    mismatched: int
    missing_views: int
    examples: list[tuple[int, int, int, int]]
    """(table, key, index value, view value) of the first mismatches."""


def diff_view_dir(replay: Replay, directory: Path, levels_matrix: Any) -> Diff:
    """Compare every live key of the rebuilt index with a view file directory."""
    idx = replay.index
    store = ViewStore(directory)
    view = IndexView(idx.layout, levels_matrix, idx.n_shards)
    for vf in store.restore():
        view.install(vf.table, vf.shard, LudoView(vf.params, vf.arrays), vf.last_seq)
    checked = mismatched = 0
    examples: list[tuple[int, int, int, int]] = []
    for shard in idx.shards:
        for t, tab in enumerate(shard.tables):
            keys, vals = tab.items()
            for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
                got = view.lookup_value(t, int(k))
                checked += 1
                if got != v:
                    mismatched += 1
                    if len(examples) < 10:
                        examples.append((t, int(k), int(v), got))
    missing = int((~view.present).sum())
    return Diff(checked, mismatched, missing, examples)


def decode_value(layout: TableLayout, table: int, value: int) -> dict[int, int]:
    """worker -> tier code of a packed value of ``table``."""
    out = {}
    for f, w in enumerate(layout.table_workers[table]):
        code = (value >> (FIELD_BITS * f)) & FIELD_MASK
        if code:
            out[w] = code
    return out
