"""The pipeline worker's shell: what the Faust agents call, and all its I/O.

``PipelineShell`` holds what the agents need and does their I/O around the pure modules: decode
records, call ``Rechunker`` / ``MaintenanceUnit``, produce ``index-ops`` / ``index-patches`` /
``dead-letters`` through one confluent-kafka producer (librdkafka batches in C; Faust's own
``topic.send`` costs tens of µs per record, too slow for 100k key-ops/s), and await the delivery
of a batch's output (``pipeline.delivery``) before taking the next batch, so that an input offset
Faust commits never runs ahead of the output it produced (at-least-once). A maintenance unit is
created, or rebuilt, when its partition's first batch arrives or when a batch does not continue
where the unit stopped: the latest complete checkpoint (``pipeline.checkpoint``, none: an empty
state) plus the replay of the shard's ``index-ops`` from the offset it covers, then a fresh epoch
(see ``pipeline/README.md``); units checkpoint every ``checkpoint_period_ms``, and once more at a
graceful stop (``close``). When the log starts above that offset (retention deleted records the
replay would need), the shard is rebuilt from ``kv-events`` instead (``pipeline.heal``: a
WARNING, ``kvc_pipeline_rebuilds_total``, a fresh epoch). A failed take is retried until it
succeeds and never acknowledged meanwhile (``pipeline.progress``); at a stop it is abandoned.

The Faust app and its agents are ``pipeline.agents`` (the one module that imports Faust): they
hand each take to this shell. Must not: hold index logic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from confluent_kafka import (
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)

from kvcompass.deployment import Deployment
from kvcompass.errors import InvalidInputError
from kvcompass.event_order import EventOrder, Verdict
from kvcompass.lag import LagHistogram
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.maintenance import MaintenanceUnit, Offsets, PatchScan, Step, replay_covers
from kvcompass.op_runs import Runs, concat, split_take
from kvcompass.rechunk import EventRef, InvalidEvent, OpBatch, OpKind, Planned, Rechunker
from kvcompass.types import Tier
from pipeline import heal
from pipeline.checkpoint import Checkpointer, Snapshot, restore
from pipeline.delivery import Delivery, DeliveryError
from pipeline.progress import Hold
from pipeline.reads import Raw, read_partition
from wire.codec import AvroCodec, DecodeError, decode_patch_key, int32_key, worker_key_mismatch
from wire.config import PipelineConfig
from wire.dead_letter import DeadLetters, reason_code_of
from wire.index_ops import decode_runs, encode_runs, split_runs_of
from wire.kafka_clients import librdkafka_conf
from wire.kv_event_batch import decode_take
from wire.patches import PatchSink, decode_value, encode_patch
from wire.registry import registry_from_url

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How one pipeline worker process runs (flags of ``kvcompass pipeline worker``)."""

    config: PipelineConfig
    deployment: Deployment
    app_id: str = "kvcompass-pipeline"
    take_max: int = 4000
    take_within_s: float = 0.01
    initial_capacity: int = 1 << 12
    fp_bits: int = 8
    seed: int = 0

    def __post_init__(self) -> None:
        if self.take_max < 1 or not self.take_within_s > 0:
            raise InvalidInputError(
                f"take: expected take_max >= 1 and take_within_s > 0; got {self.take_max}, "
                f"{self.take_within_s}"
            )


def _now_ms() -> int:
    return int(time.time() * 1000)


HOPS = ("kv_events", "rechunk", "index_ops", "maintain", "event_to_patch")
"""The worker's hops, each a ``LagHistogram`` in ms (``kvc_pipeline_hop_ms{hop}``):
``kv_events``: a kv-events record's Kafka timestamp (the sidecar produced it) -> its take
reached the rechunk consumer (sidecar linger, broker, fetch and take wait);
``rechunk``: decode, rechunk, produce and delivery of a take, per event;
``index_ops``: an index-ops record's timestamp -> its take reached the maintenance actor;
``maintain``: decode, apply, patch encode, produce and delivery of a take, per record;
``event_to_patch``: a source event's produce -> its patches delivered to index-patches."""


class PipelineShell:
    """State and I/O of one worker process; the agents call ``rechunk`` and ``maintain``."""

    def __init__(self, settings: WorkerSettings, delivery: Delivery | None = None) -> None:
        cfg = settings.config
        dep = settings.deployment
        self.settings = settings
        self.topics = cfg.topics
        self.layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
        self.rechunker = Rechunker(
            self.layout, Levels.from_deployment(dep), dep.worker_region, cfg.n_shards
        )
        registry = registry_from_url(cfg.schema_registry_url)
        self.codec = AvroCodec(registry)

        def make_producer(on_delivery: Any) -> Producer:
            return Producer(
                librdkafka_conf(
                    cfg,
                    {
                        "linger.ms": 2,
                        "batch.num.messages": 10_000,
                        "queue.buffering.max.messages": 1_000_000,
                        # aiokafka (Faust's consumer) reads index-ops; it has no lz4/zstd here
                        "compression.type": "none",
                        "enable.idempotence": True,
                        "on_delivery": on_delivery,
                    },
                )
            )

        self.delivery = delivery or Delivery(make_producer)
        self.producer = self.delivery
        self.sink = PatchSink(
            self.producer, self.topics.index_patches, registry.writer_id("IndexPatch")
        )
        self.dead = DeadLetters(self.producer, self.codec, self.topics.dead_letters, "pipeline",
                                cfg.dead_letter_max_raw_bytes)  # fmt: skip
        self.units: dict[int, MaintenanceUnit] = {}
        self.checkpoints = Checkpointer(
            self.delivery,
            self.codec,
            self.topics.index_snapshots,
            cfg.checkpoint_period_ms,
            cfg.checkpoint_chunk_bytes,
        )
        self.hold = Hold()
        self.key_ops = 0
        self.recoveries = 0
        self.rebuilds = 0
        """Shards rebuilt from kv-events because their index-ops tail was gone."""
        self.last_rebuild_s = 0.0
        self.last_recovery_s = 0.0
        self.cache_unknown: set[int] = set()
        """Workers whose last event said cache_state UNKNOWN (degraded sidecar)."""
        self.cache_unknown_reports = 0
        self.order = EventOrder()
        """Per worker, its last applied event (``kvcompass.event_order``)."""
        self.redelivered = 0
        """kv-events records skipped as re-deliveries of events already rechunked."""
        self.undecodable_patches = 0
        self.hops = {h: LagHistogram() for h in HOPS}
        self._take_produced: list[int] = []
        self._warm_up()

    # -- stopping (issue 26 item 4) ---------------------------------------------------------
    def begin_stop(self) -> None:
        """SIGTERM/SIGINT, on the loop: held steps stop retrying (``StepAbandoned``)."""
        self.hold.stop()

    def pending(self) -> list[str]:
        """What a stop cut short now would leave undone (the stop deadline's report)."""
        out = [f"{step} held: {why}" for step, why in sorted(self.hold.held.items())]
        if self.units:
            out.append(f"final checkpoints of shards {sorted(self.units)}")
        return out

    def close(self, timeout_s: float) -> list[str]:
        """After the agents ended: deliver what was produced, then write every unit's final
        checkpoint (the next start replays no tail). Returns, and logs, what could not be done."""
        t0 = time.monotonic()
        left: list[str] = []
        undelivered = self.producer.flush(max(0.1, timeout_s / 2))
        if undelivered:
            left.append(f"{undelivered} produced records undelivered (broker unreachable?)")
        for p, unit in sorted(self.units.items()):
            remaining = timeout_s - (time.monotonic() - t0)
            if undelivered or remaining <= 0.5:
                left.append(f"final checkpoint of shard {p} (no broker or no time left)")
                continue
            try:
                self.checkpoints.write_now(unit, _now_ms(), remaining)
            except (DeliveryError, KafkaException, BufferError) as exc:
                left.append(f"final checkpoint of shard {p} ({exc})")
        if left:
            log.error("pipeline stopping: not done: %s; the next start recovers from the last "
                      "complete checkpoints and the index-ops tail", "; ".join(left))  # fmt: skip
        else:
            log.info("pipeline stopped: output delivered, final checkpoints of shards %s written",
                     sorted(self.units))  # fmt: skip
        return left

    def _warm_up(self) -> None:
        """Load the numba kernels now, not inside the first batch (latency of the first events)."""
        unit = MaintenanceUnit(self.layout, 0, self.settings.config.n_shards, initial_capacity=16)
        n = np.uint64(self.settings.config.n_shards)
        keys = np.arange(1, 9, dtype=np.uint64) * n
        src = EventRef(0, 0, "", 0, -1, 0)
        steps = [unit.recover([], PatchScan(), 0)]
        steps.append(unit.apply([OpBatch(0, 0, 0, OpKind.SET, Tier.VRAM, keys, src)], 0))
        steps.append(unit.apply([OpBatch(0, 0, 0, OpKind.REMOVE, Tier.NONE, keys, src)], 1))
        for st in steps:
            for p in st.patches:
                encode_patch(self.sink.schema_id, p, 0, 0)

    def _dead(self, raw: Raw, exc: BaseException) -> None:
        rec = self.dead.file(
            topic=raw.topic, partition=raw.partition, offset=raw.offset, key=raw.key,
            raw=raw.value, reason_code=reason_code_of(exc), reason=str(exc), now_ms=_now_ms(),
        )  # fmt: skip
        log.warning(
            "dead letter %s[%d]@%d: %s", raw.topic, raw.partition, raw.offset, rec["reason"]
        )

    # -- rechunk: kv-events -> index-ops ----------------------------------------------------
    async def rechunk_until_done(self, batch: Sequence[Raw]) -> int:
        """``rechunk``, retried until the whole take is handled (re-produced ops are harmless)."""
        return await self.hold.until_done("rechunk", lambda: self.rechunk(batch))

    async def rechunk(self, batch: Sequence[Raw]) -> int:
        """Rechunk consumed events into one op record per shard; return the records produced."""
        t0 = time.time() * 1000.0
        produced = [r.timestamp_ms for r in batch if r.timestamp_ms >= 0]
        if produced:
            self.hops["kv_events"].observe(t0 - np.asarray(produced, np.float64))
        start = self.delivery.mark()
        planned: list[Planned] = []
        sources: list[EventRef] = []
        order = self.order.copy()  # committed only once this take's output is delivered
        redelivered = 0
        fast = decode_take([raw.value for raw in batch])  # one numba pass; None: the codec's
        for raw, ev in zip(batch, fast, strict=True):
            try:
                if ev is None:
                    if raw.value is None:
                        raise DecodeError("expected a KvEvent; got a null value")
                    name, ev = self.codec.decode(raw.value)
                    if name != "KvEvent":
                        raise InvalidEvent(f"expected a KvEvent record; got {name}", "INVALID")
                src = EventRef(int(ev["worker_id"]), int(ev["engine_seq"]), raw.topic,
                               raw.partition, raw.offset, int(ev["timestamp_ms"]),
                               raw.timestamp_ms)  # fmt: skip
                mismatch = worker_key_mismatch(raw.key, src.worker_id)
                if mismatch is not None:
                    raise InvalidEvent(mismatch)
                verdict = order.judge(src.worker_id, src.engine_seq, raw.partition, raw.offset)
                if verdict is Verdict.REDELIVERED:
                    redelivered += 1
                    continue
                if verdict is Verdict.LATE:
                    raise InvalidEvent(order.why_late(src.worker_id, src.engine_seq))
                planned.append(self.rechunker.plan(ev))
                sources.append(src)
                order.accept(src.worker_id, src.engine_seq, raw.partition, raw.offset)
                self._cache_state(src.worker_id, ev.get("cache_state", "KNOWN"))
            except (InvalidInputError, KeyError, ValueError) as exc:
                self._dead(raw, exc)
        records = 0
        for runs in split_take(planned, sources, self.rechunker.n_shards):
            for part in split_runs_of(runs):  # bounded records: the broker never refuses one
                value = self.codec.encode("IndexOpBatch", encode_runs(part))
                self.producer.produce(self.topics.index_ops, value, int32_key(part.shard),
                                      part.shard)  # fmt: skip
                records += 1
        await self.delivery.delivered_up_to(self.delivery.mark(), since=start)
        self.order = order
        self.redelivered += redelivered
        self.hops["rechunk"].observe([time.time() * 1000.0 - t0], weight=len(batch))
        return records

    def _cache_state(self, worker: int, state: str) -> None:
        """Follow a worker's reported cache state (KvEvent v2): UNKNOWN while its sidecar is
        degraded. The index then lacks prefixes the worker holds; say so once per episode."""
        if state == "UNKNOWN" and worker not in self.cache_unknown:
            self.cache_unknown.add(worker)
            self.cache_unknown_reports += 1
            log.warning(
                "worker %d: its sidecar reports its cache unknown (events lost beyond the "
                "engine's replay buffer); the index lacks what it holds",
                worker,
            )
        elif state == "KNOWN" and worker in self.cache_unknown:
            self.cache_unknown.discard(worker)
            log.info("worker %d: cache known again (its sidecar re-learned it)", worker)

    def _decode_ops(self, value: bytes | None) -> Runs:
        name, rec = self.codec.decode(value or b"")
        if name != "IndexOpBatch":
            raise InvalidEvent(f"expected an IndexOpBatch record; got {name}")
        return decode_runs(rec)

    # -- maintenance: index-ops -> index-patches --------------------------------------------
    def _recover(self, partition: int, first_offset: int) -> MaintenanceUnit:
        """Blocking: rebuild shard ``partition`` from its latest complete checkpoint (covering
        index-ops[0, c)) and index-ops[c, first_offset), or, when that tail is gone, from
        ``kv-events`` (``pipeline.heal``); then publish a fresh epoch."""
        s = self.settings
        t0 = time.perf_counter()
        snaps = read_partition(s.config, self.topics.index_snapshots, partition)
        snap, stale = self.checkpoints.read([(r.key, r.value) for r in snaps])
        covered = 0 if snap is None else snap.covered_offset
        scan = self.scan_patches(read_partition(s.config, self.topics.index_patches, partition))
        unit = MaintenanceUnit(self.layout, partition, s.config.n_shards, fp_bits=s.fp_bits,
                               initial_capacity=s.initial_capacity, seed=s.seed)  # fmt: skip
        history: list[tuple[int, OpBatch | Runs]] = []
        gone = self._tail_gone(partition, covered)
        if gone is None:
            ops = read_partition(s.config, self.topics.index_ops, partition, first_offset,
                                 start=covered)  # fmt: skip
            if ops and not replay_covers(ops[0].offset, covered):  # deleted since the check
                gone = f"the replay starts at offset {ops[0].offset}, above {covered}"
            for r in ops if gone is None else ():
                try:
                    history.append((r.offset, self._decode_ops(r.value)))
                except (InvalidInputError, KeyError, ValueError):
                    continue  # dead-lettered when it was first met
        if gone is not None:
            step, how = self._rebuild(unit, snap, scan, first_offset, gone)
        else:
            if snap is not None:
                restore(unit, snap, scan)
            step = unit.recover(history, scan, first_offset)
            how = (
                "no checkpoint"
                if snap is None
                else f"checkpoint {snap.snapshot_id} ({snap.entries} entries)"
            ) + f" and {len(history)} op runs (index-ops "
            how += f"{covered}..{first_offset})"  # fmt: skip
        self.sink.send(step.patches, step.retired, step.source_offset, _now_ms())
        self.producer.flush(30)
        self.recoveries += 1
        self.checkpoints.start(partition, _now_ms(), snap, stale)
        self.last_recovery_s = time.perf_counter() - t0
        log.info("shard %d rebuilt from %s in %.3f s; fresh epoch published up to seq %d",
                 partition, how, self.last_recovery_s, unit.state.seq)  # fmt: skip
        return unit

    def _rebuild(self, unit: MaintenanceUnit, snap: Snapshot | None, scan: PatchScan,
                 first_offset: int, gone: str) -> tuple[Step, str]:  # fmt: skip
        """The index-ops tail is gone: the shard from kv-events (``pipeline.heal``)."""
        cfg, partition = self.settings.config, unit.shard
        t0 = time.perf_counter()
        start = heal.kv_log_start(cfg)
        use_snap, why = heal.choose_base(snap, start, cfg.checkpoint_margin_ms)
        log.warning("shard %d: %s; rebuilding it from %s (%s) + %s", partition, gone,
                    cfg.topics.kv_events, heal.describe(start),
                    f"checkpoint: {why}" if use_snap else f"an empty state: {why}")  # fmt: skip
        if use_snap and snap is not None:
            restore(unit, snap, scan)
        elif not start.complete:
            log.warning(
                "shard %d: entries whose last event is older than the kv-events log start "
                "stay missing until their workers report them again",
                partition,
            )
        stats = heal.RebuildStats()
        history = heal.events_history(cfg, self.codec, self.rechunker, partition, start, stats)
        step = unit.recover(history, scan, first_offset)
        unit.reflected = dict(start.high)
        self.rebuilds += 1
        self.last_rebuild_s = time.perf_counter() - t0
        how = (f"kv-events ({stats.events} events, {stats.runs} op runs of this shard, "
               f"{stats.skipped} skipped) in {self.last_rebuild_s:.3f} s: self-healed")  # fmt: skip
        return step, how

    def scan_patches(self, records: Sequence[Raw]) -> PatchScan:
        """What a shard's ``index-patches`` says (epochs, last seq, live pieces). A record that
        does not decode is skipped and counted (edges skip it too): it must not make every
        recovery of the shard fail, and it is not the unit's to dead-letter on each rebuild."""
        scan = PatchScan()
        for r in records:
            if r.key is None:
                continue
            try:
                key = decode_patch_key(r.key).as_tuple()
                seq = (
                    None
                    if r.value is None
                    else decode_value(self.sink.schema_id, r.value).record.seq
                )
            except (InvalidInputError, KeyError, ValueError) as exc:
                self.undecodable_patches += 1
                log.warning(
                    "%s[%d]@%d: skipped in recovery: %s", r.topic, r.partition, r.offset, exc
                )
                continue
            scan.observe(key, seq)
        return scan

    def _tail_gone(self, partition: int, covered: int) -> str | None:
        """Why index-ops[partition] lost records a replay from ``covered`` (the checkpoint's
        offset; 0: none) needs (e.g. retention deleted them), or None if it did not."""
        conf = {"group.id": "kvcompass-recovery", "enable.auto.commit": False}
        c = Consumer(librdkafka_conf(self.settings.config, conf))
        try:
            tp = TopicPartition(self.topics.index_ops, partition)
            low, _ = c.get_watermark_offsets(tp, timeout=60.0)
        finally:
            c.close()
        if replay_covers(low, covered):
            return None
        return (f"{self.topics.index_ops}[{partition}] starts at offset {low} but the latest "
                f"complete checkpoint covers only offsets < {covered}")  # fmt: skip

    async def maintain_until_done(self, batch: Sequence[Raw]) -> int:
        """``maintain``, retried until done; a failed attempt drops the unit (rebuilt next try:
        what the failed attempt produced may be partly lost, a recovery republishes it all)."""
        if not batch:
            return 0
        p = batch[0].partition
        return await self.hold.until_done(
            f"maintain[{p}]", lambda: self.maintain(batch), lambda _: self.units.pop(p, None)
        )

    async def maintain(self, batch: Sequence[Raw]) -> int:
        """Apply one take of one partition; return the key-ops applied."""
        if not batch:
            return 0
        t0 = time.time() * 1000.0
        made = [r.timestamp_ms for r in batch if r.timestamp_ms >= 0]
        if made:
            self.hops["index_ops"].observe(t0 - np.asarray(made, np.float64))
        start = self.delivery.mark()
        p = batch[0].partition
        unit = self.units.get(p)
        if unit is None or unit.position(batch[0].offset) is Offsets.GAP:
            loop = asyncio.get_running_loop()
            unit = await loop.run_in_executor(None, self._recover, p, batch[0].offset)
            self.units[p] = unit
        n = self.apply(unit, batch)
        if self.checkpoints.due(p, _now_ms()):
            await self.checkpoints.write(unit, _now_ms())
        await self.delivery.delivered_up_to(self.delivery.mark(), since=start)
        t1 = time.time() * 1000.0
        self.hops["maintain"].observe([t1 - t0], weight=len(batch))
        if self._take_produced:
            self.hops["event_to_patch"].observe(t1 - np.asarray(self._take_produced, np.float64))
        return n

    def apply(self, unit: MaintenanceUnit, batch: Sequence[Raw]) -> int:
        """Decode, check, apply and produce one batch for an up-to-date unit (no waiting)."""
        good: list[Runs] = []
        last = unit.next_offset - 1
        for raw in batch:
            if unit.position(raw.offset) is Offsets.SEEN:
                continue
            last = raw.offset
            try:
                runs = unit.unreflected(self._decode_ops(raw.value))
                reason = unit.check_runs(runs)
                if reason is not None:
                    raise InvalidEvent(reason)
            except (InvalidInputError, KeyError, ValueError) as exc:
                self._dead(raw, exc)  # the whole record: its runs were checked by rechunk
                continue
            good.append(runs)
        if last < unit.next_offset:
            return 0
        take = concat(unit.shard, good)
        step = unit.apply_runs(take, last)
        produced = [r.produced_ms for r in take.sources if r.produced_ms >= 0]
        self._take_produced = produced
        self.sink.send(step.patches, step.retired, step.source_offset, _now_ms(),
                       min(produced, default=-1))  # fmt: skip
        n = int(take.keys.size)
        self.key_ops += n
        return n
