"""Self-healing shards (issue 26 item 3): a shard whose ``index-ops`` tail is gone is rebuilt from
``kv-events``, the durable log, instead of staying frozen until a person resets it.

Owns reading ``kv-events`` for one shard's rebuild (``events_history``: every partition from its
log start up to its end offset *now*, each event through the live pipeline's own checks, key and
order rule (``kvcompass.event_order``) and ``Rechunker``, keeping the runs of that shard) and
choosing the base of the rebuild (``choose_base``).

Why it is exact, and how it meets the live ops (``pipeline.shell._recover`` runs it):

- A worker's field of a key is the last op on it; a worker's events are applied in order. The
  rebuilt state reflects every event below ``ends`` (per partition).
- ``index-ops`` records after the recovery point carry the ``EventRef`` of their source event:
  ops whose source is below ``ends`` are already reflected and are skipped
  (``MaintenanceUnit.reflected``), the others applied as usual; so the live stream continues the
  rebuilt state exactly, with no transient regression. Other shards are not touched: each shard
  has its own unit, and the rebuild keeps only this shard's runs.
- Base: with every ``kv-events`` partition complete (log start 0), an empty state. Once
  retention deleted old events, an event older than the log start may still define a live entry
  (a prefix stored a week ago and never touched since): the latest complete checkpoint is then
  the base if it reflects every event older than the log start (it was taken more than
  ``checkpoint_margin_ms`` after the newest of the partitions' first surviving records, so the
  events before them were applied by then): replaying the surviving events over it gives, for
  each (key, worker), its last op if one survives, else the checkpoint's value, which is then the
  last op. Without such a checkpoint the rebuild starts empty and says that entries whose last
  event is older than the log start are missing (false negatives only: never a stale holder).

Must not: publish or decide when to rebuild (``pipeline.shell``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, TopicPartition

from kvcompass.errors import InvalidInputError
from kvcompass.event_order import EventOrder, Verdict
from kvcompass.rechunk import EventRef, OpBatch, Rechunker
from pipeline.checkpoint import Snapshot
from wire.codec import AvroCodec, worker_key_mismatch
from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf

log = logging.getLogger(__name__)


@dataclass
class LogStart:
    """``kv-events`` now: per partition (log start, end, timestamp of the first record)."""

    low: dict[int, int] = field(default_factory=dict)
    high: dict[int, int] = field(default_factory=dict)
    first_ms: dict[int, int] = field(default_factory=dict)
    """Broker timestamp of the record at the log start, for partitions whose start moved."""

    @property
    def complete(self) -> bool:
        return all(v == 0 for v in self.low.values())


@dataclass
class RebuildStats:
    events: int = 0
    runs: int = 0
    skipped: int = 0
    """Records not applied: undecodable, wrong key, late or invalid (dead-lettered live)."""


def kv_log_start(cfg: PipelineConfig, timeout_s: float = 60.0) -> LogStart:
    c = Consumer(librdkafka_conf(cfg, {"group.id": "kvcompass-heal", "enable.auto.commit": False}))
    topic = cfg.topics.kv_events
    out = LogStart()
    try:
        parts = sorted(c.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            out.low[p], out.high[p] = int(low), int(high)
        for p in parts:
            if 0 < out.low[p] < out.high[p]:
                c.assign([TopicPartition(topic, p, out.low[p])])
                msg = c.consume(1, timeout_s)
                if msg and msg[0].error() is None:
                    out.first_ms[p] = int(msg[0].timestamp()[1])
    finally:
        c.close()
    return out


def choose_base(snap: Snapshot | None, start: LogStart, margin_ms: int) -> tuple[bool, str]:
    """(use the checkpoint as the base, why): see the module docstring."""
    if start.complete:
        return False, "kv-events is complete (every partition starts at offset 0)"
    if snap is None:
        return False, "no complete checkpoint"
    newest_first = max(start.first_ms.values(), default=0)
    if snap.created_ms - margin_ms >= newest_first:
        return True, (f"checkpoint {snap.snapshot_id} (taken {snap.created_ms}) reflects every "
                      f"event older than the kv-events log start")  # fmt: skip
    return False, (f"checkpoint {snap.snapshot_id} is older than the kv-events log start "
                   f"(first surviving record at {newest_first} ms)")  # fmt: skip


def _records(
    cfg: PipelineConfig, start: LogStart, timeout_s: float
) -> Iterator[tuple[int, int, bytes | None, bytes | None]]:
    topic = cfg.topics.kv_events
    conf = {"group.id": "kvcompass-heal", "enable.auto.commit": False, "enable.partition.eof": True}
    c = Consumer(librdkafka_conf(cfg, conf))
    try:
        for p in sorted(start.high):
            lo, hi = start.low[p], start.high[p]
            if hi <= lo:
                continue
            c.assign([TopicPartition(topic, p, lo)])
            deadline = time.monotonic() + timeout_s
            done = False
            while not done:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading {topic}[{p}] up to {hi} took over {timeout_s} s")
                for m in c.consume(10_000, 0.2):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            done = True
                            break
                        raise RuntimeError(f"reading {topic}[{p}]: {err}")
                    off = int(m.offset() or 0)
                    if off >= hi:
                        done = True
                        break
                    yield p, off, m.key(), m.value()
                    if off == hi - 1:
                        done = True
                        break
    finally:
        c.close()


def events_history(
    cfg: PipelineConfig,
    codec: AvroCodec,
    rechunker: Rechunker,
    shard: int,
    start: LogStart,
    stats: RebuildStats,
    timeout_s: float = 600.0,
) -> Iterator[tuple[int, OpBatch]]:
    """``(offset, run)`` of shard ``shard`` for every applicable event of ``kv-events`` in
    [log start, ``start.high``): the live rechunk's checks and order, offline."""
    order = EventOrder()
    topic = cfg.topics.kv_events
    for p, off, key, value in _records(cfg, start, timeout_s):
        try:
            name, ev = codec.decode(value or b"")
            if name != "KvEvent":
                raise InvalidInputError(f"expected KvEvent; got {name}")
            worker = int(ev["worker_id"])
            if worker_key_mismatch(key, worker) is not None:
                raise InvalidInputError("key")
            seq = int(ev["engine_seq"])
            if order.judge(worker, seq, p, off) is not Verdict.APPLY:
                raise InvalidInputError("order")
            src = EventRef(worker, seq, topic, p, off, int(ev["timestamp_ms"]))
            runs = rechunker.rechunk(ev, src)
        except (InvalidInputError, KeyError, ValueError):
            stats.skipped += 1
            continue
        order.accept(worker, seq, p, off)
        stats.events += 1
        for b in runs:
            if b.shard == shard:
                stats.runs += 1
                yield off, b


def describe(start: LogStart) -> dict[int, tuple[int, int]]:
    return {p: (start.low[p], start.high[p]) for p in sorted(start.high)}
