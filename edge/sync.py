"""Kafka glue of the edge: views from ``index-patches``, queue estimates from ``queue-vectors``.

Owns two followers:
- ``PatchFollower``: the pipeline's ``PatchApplier`` (``pipeline.view_sync``) over the edge's own
  ``IndexView`` and ``ViewStore``. On start it restores the committed view files and resumes every
  partition from the offset stored in their headers; with no files it reads the compacted topic
  from the beginning (bootstrap). ``consume`` runs in a worker thread (it blocks); records are
  applied on the event loop, between requests, so a lookup never sees a half-applied batch.
  ``save`` writes progress (last seq, next offset) into the view files and deletes superseded
  epochs; the main loop calls it every ``offsets_flush_period_ms`` and at shutdown. Every
  ``patch_stall_check_ms`` it also checks that it still reads what the broker has
  (``edge.follower_watch``): a stall is logged with the follower's state and librdkafka's own
  (leader, fetch state per partition, from its statistics), counted, shown in ``/health``, and
  the partitions are assigned again where the follower stands (a librdkafka consumer once sat on
  ``leader=-1`` for minutes after a broker restart, fetching nothing and reporting nothing).
- ``QueueVectorFollower``: every region's periodic broadcast (``QueueVector``, newest only by
  ``seq`` per region) → ``Router.on_broadcast``; the edge's own region is skipped (read live).
  The sidecars' cache-state reports in them (degraded workers) go to ``EdgeApp.cache_states``
  from every region, the edge's own included.
  Bad records go to ``dead-letters`` with the reason (``pipeline.dead_letter.DeadLetters``).
Must not route or serve HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Awaitable
from typing import Any

import numpy as np
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from edge.app import EdgeApp
from edge.follower_watch import PartitionView, behind, partition_views, stalled
from pipeline.dead_letter import DeadLetters, reason_code_of
from pipeline.producer import ProducerPort
from pipeline.view_sync import PatchApplier

_MAX_BATCH = 5000
log = logging.getLogger(__name__)


def consumer_conf(bootstrap: str, what: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": f"kvcompass-edge-{what}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 10,
        "fetch.min.bytes": 1,
    }


async def _consume(consumer: Any, timeout_s: float) -> list[Any]:
    msgs: list[Any] = await asyncio.to_thread(consumer.consume, _MAX_BATCH, timeout_s)
    return msgs


async def _guarded(step: Awaitable[object], edge: EdgeApp, what: str) -> bool:
    """Run one poll; a failure (broker error, or a record the applier cannot use) is logged and
    counted, never fatal to the edge: the view only ages, which ``view_staleness_ms`` shows.
    False if it failed."""
    try:
        await step
        return True
    except KafkaException as exc:
        log.warning("%s consumer: %s", what, exc)
        edge.service.metrics.inc("errors_total", type=f"kafka-{what}")
        return False
    except Exception:  # keep serving with the last good view; the log has the traceback
        log.exception("%s consumer step failed", what)
        edge.service.metrics.inc("errors_total", type=f"sync-{what}")
        return False


async def _pause(stop: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), 1.0)


class PatchFollower:
    """``index-patches`` → the edge's view (bootstrap, resume, progress in the view files)."""

    def __init__(self, edge: EdgeApp, consumer: Any) -> None:
        self.edge = edge
        self.consumer = consumer
        self.topic = edge.pipeline.patches_topic
        schema_id = edge.registry.writer_id("IndexPatch")
        self.applier = PatchApplier(edge.view, edge.store, edge.service.codec, schema_id)
        self.applier.on_apply = self._applied
        self.resumed: dict[int, int] = {}
        self.stalled: list[int] = []
        """Partitions found stalled at the last check (empty: none; ``/health`` shows them)."""
        self.rdkafka: dict[int, PartitionView] = {}
        """librdkafka's state of each partition, from its latest statistics (``on_stats``)."""
        self._progress: dict[int, int] = {}

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's statistics callback (served inside ``consume``)."""
        self.rdkafka = partition_views(stats_json, self.topic)

    def _applied(self, shard: int) -> None:
        svc = self.edge.service
        svc.view_applied_ms = svc.clock_ms()
        svc.metrics.inc("patches_applied_total")

    def start(self) -> dict[int, int]:
        """Restore view files and assign partitions; return the resumed offsets per shard."""
        self.resumed = self.applier.restore()
        if self.resumed:
            self.edge.service.view_applied_ms = self.edge.service.clock_ms()
        n = self.edge.view.n_shards
        tps = [TopicPartition(self.topic, s, self.resumed.get(s, OFFSET_BEGINNING))
               for s in range(n)]  # fmt: skip
        self.consumer.assign(tps)
        return self.resumed

    def feed(self, msgs: list[Any], full: bool) -> int:
        n = 0
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.edge.service.metrics.inc("errors_total", type="patch-consumer")
                continue
            self.applier.feed(m.partition(), m.offset(), m.value())
            n += 1
        if not full:
            self.applier.idle()
        undecodable = self.applier.stats.undecodable
        m = self.edge.service.metrics
        seen = m.get("dead_letters_total", topic=self.topic)
        if undecodable > seen:  # the applier counts them; surface the count as a metric
            m.inc("dead_letters_total", undecodable - seen, topic=self.topic)
        return n

    async def poll_once(self, timeout_s: float = 0.05) -> int:
        msgs = await _consume(self.consumer, timeout_s)
        return self.feed(msgs, len(msgs) >= _MAX_BATCH)

    def save(self) -> None:
        for path in self.applier.save():
            path.unlink(missing_ok=True)
        if self.edge.store is not None:
            self.edge.store.flush()

    async def catch_up(self, timeout_s: float) -> bool:
        """Read until the end offsets seen now are reached (bootstrap / resume)."""
        n = self.edge.view.n_shards
        targets = {}
        deadline = time.monotonic() + timeout_s
        for s in range(n):
            low, high = await self._watermarks(s, deadline)
            targets[s] = int(high) if high > low else -1
        while time.monotonic() < deadline:
            await self.poll_once()
            nxt = self.applier.next_offset
            if all(nxt.get(s, self.resumed.get(s, -1)) >= t for s, t in targets.items()):
                self.applier.idle()
                self.save()
                return True
        return False

    async def _watermarks(self, shard: int, deadline: float) -> tuple[int, int]:
        # A freshly created topic answers NOT_LEADER until its leader is elected: retry.
        tp = TopicPartition(self.topic, shard)
        while True:
            try:
                low, high = await asyncio.to_thread(self.consumer.get_watermark_offsets, tp, 5.0)
                return int(low), int(high)
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)

    def progress(self) -> dict[int, int]:
        """Partition -> next offset to read (-1: nothing read yet): what was fed to the applier,
        or the consumer's position when it is past that (records removed by compaction)."""
        n = self.edge.view.n_shards
        positions = self.consumer.position([TopicPartition(self.topic, s) for s in range(n)])
        out = {s: self.applier.next_offset.get(s, -1) for s in range(n)}
        for tp in positions:
            out[tp.partition] = max(out[tp.partition], int(tp.offset))
        return out

    def _marks(self, timeout_s: float) -> tuple[dict[int, tuple[int, int]] | None, bool]:
        """(low, high) of every partition, asked of the broker now, and whether this follower's
        own consumer could ask. It asks the partition leaders, so a consumer that lost them
        cannot; then a fresh client asks (in the one real stall reproduced with only the own
        consumer asking, 151 s without reading, no stall was reported: what a failing own query
        gives). (None, False) if neither gets an answer (a broker that is down is not a stall of
        this follower)."""
        try:
            return _watermarks_of(
                self.consumer, self.topic, self.edge.view.n_shards, timeout_s
            ), True
        except KafkaException:
            pass
        fresh = Consumer(consumer_conf(self.edge.pipeline.bootstrap_servers, "watch"))
        try:
            return _watermarks_of(fresh, self.topic, self.edge.view.n_shards, timeout_s), False
        except KafkaException:
            return None, False
        finally:
            fresh.close()

    async def check_stall(self) -> list[int]:
        """Compare progress with the broker's end offsets (``edge.follower_watch.stalled``); on a
        stall, say everything known about it and assign the partitions again where the follower
        stands (a fresh start of librdkafka's partition state: leader lookup, fetch). Returns the
        stalled partitions."""
        marks, own = await asyncio.to_thread(self._marks, 2.0)
        if marks is None:  # judge only whole periods with the broker answering
            self._progress = {}
            return self.stalled
        now = self.progress()
        stuck = stalled(self._progress, now, marks, self.rdkafka)
        self._progress = now
        if not stuck:
            if self.stalled:
                log.info("index-patches follower: reading again (was stalled on %s); behind %s",
                         self.stalled, behind(now, marks))  # fmt: skip
            self.stalled = []
            return []
        state = {
            p: {"have": now.get(p, -1), "low_high": marks[p],
                "rdkafka": self.rdkafka[p].as_dict() if p in self.rdkafka else None}
            for p in sorted(marks)
        }  # fmt: skip
        assignment = sorted(tp.partition for tp in self.consumer.assignment())
        log.warning("index-patches follower stalled on partitions %s (no progress in %.0f s with "
                    "records to read); assigned %s; its consumer %s ask the watermarks; per "
                    "partition %s; assigning again", stuck,
                    self.edge.config.patch_stall_check_ms / 1000.0, assignment,
                    "could" if own else "could NOT", state)  # fmt: skip
        self.edge.service.metrics.inc("patch_stalls_total")
        self.stalled = stuck
        with contextlib.suppress(KafkaException):  # fresh metadata first: the leaders as of now
            await asyncio.to_thread(self.consumer.list_topics, self.topic, 2.0)
        start = {p: o if o >= 0 else self.resumed.get(p, OFFSET_BEGINNING) for p, o in now.items()}
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(start.items())])
        return stuck

    async def run(self, stop: asyncio.Event) -> None:
        period_s = self.edge.config.offsets_flush_period_ms / 1000.0
        check_s = self.edge.config.patch_stall_check_ms / 1000.0
        saved_at = checked_at = time.monotonic()
        while not stop.is_set():
            if not await _guarded(self.poll_once(), self.edge, "patches"):
                await _pause(stop)
            if time.monotonic() - saved_at >= period_s:
                self.save()
                saved_at = time.monotonic()
            if time.monotonic() - checked_at >= check_s:
                await _guarded(self.check_stall(), self.edge, "patches-watch")
                checked_at = time.monotonic()
        self.save()

    def close(self) -> None:
        self.save()
        self.consumer.close()


def _watermarks_of(
    consumer: Any, topic: str, n: int, timeout_s: float
) -> dict[int, tuple[int, int]]:
    out = {}
    for s in range(n):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, s), timeout=timeout_s, cached=False
        )
        out[s] = (int(low), int(high))
    return out


class QueueVectorFollower:
    """``queue-vectors`` → ``Router.on_broadcast`` (remote regions only, newest seq wins)."""

    def __init__(self, edge: EdgeApp, consumer: Any, dead_letters: DeadLetters) -> None:
        self.edge = edge
        self.consumer = consumer
        self.dead = dead_letters
        self.topic = edge.pipeline.topics.queue_vectors
        self.topics = edge.pipeline.mirrored(self.topic)
        """The local topic and its MirrorMaker 2 copies (``PipelineConfig.mirror_sources``)."""
        self.last_seq: dict[int, int] = {}

    def start(self) -> None:
        n = self.edge.pipeline.queue_vectors_partitions
        self.consumer.assign(
            [TopicPartition(t, p, OFFSET_END) for t in self.topics for p in range(n)]
        )

    def handle(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        topic: str | None = None,
    ) -> bool:
        """Fold one record in; a bad one becomes a dead letter. True if applied."""
        svc = self.edge.service
        try:
            name, rec = svc.codec.decode(value or b"")
            if name != "QueueVector":
                raise ValueError(f"expected a QueueVector record, got {name}")
            region, ids, qs = _checked(rec, svc.deployment.worker_region)
            became = self.edge.cache_states.report(
                rec["bridged_worker_ids"], rec["cache_unknown_worker_ids"],
                svc.deployment.n_workers, svc.clock_ms(),
            )  # fmt: skip
        except Exception as exc:  # every bad record is filed, none stops the consumer
            source = topic or self.topic
            self.dead.file(topic=source, partition=partition, offset=offset, key=key,
                           raw=value, reason_code=reason_code_of(exc), reason=str(exc)[:500],
                           now_ms=int(time.time() * 1000))  # fmt: skip
            svc.metrics.inc("dead_letters_total", topic=source)
            return False
        for w in became:  # before the own-region skip: local edges learn it here too
            log.warning("worker %d: its sidecar reports its cache unknown (degraded)", w)
            svc.metrics.inc("cache_unknown_total", worker=w)
        if region == svc.origin or rec["seq"] < self.last_seq.get(region, -(2**62)):
            return False
        self.last_seq[region] = rec["seq"]
        svc.router.on_broadcast(region, ids, qs, svc.clock_ms())
        svc.metrics.inc("queue_vectors_total")
        return True

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not await _guarded(self._poll_once(), self.edge, "queue-vectors"):
                await _pause(stop)

    async def _poll_once(self) -> None:
        for m in await _consume(self.consumer, 0.05):
            if m.error() is None:
                self.handle(m.partition(), m.offset(), m.key(), m.value(), m.topic())

    def close(self) -> None:
        self.consumer.close()


def _checked(rec: dict[str, Any], worker_region: Any) -> tuple[int, np.ndarray, np.ndarray]:
    from kvcompass.errors import InvalidInputError, UnknownWorkerError

    region = int(rec["region_id"])
    ids = np.asarray(rec["worker_ids"], dtype=np.int64)
    qs = np.asarray(rec["queue_ms"], dtype=np.float64)
    n_regions = int(worker_region.max()) + 1
    if not 0 <= region < n_regions:
        raise InvalidInputError(f"region_id: expected 0..{n_regions - 1}, got {region}")
    if ids.shape != qs.shape or not ids.size:
        raise InvalidInputError(f"expected equal non-empty arrays, got {ids.size} ids and "
                                f"{qs.size} values")  # fmt: skip
    if ids.min() < 0 or ids.max() >= worker_region.size or (worker_region[ids] != region).any():
        raise UnknownWorkerError(f"worker_ids: expected workers of region {region}, got "
                                 f"{ids.tolist()[:20]}")  # fmt: skip
    if not all(math.isfinite(q) and q >= 0 for q in qs.tolist()):
        raise InvalidInputError("queue_ms: expected finite values >= 0")
    return region, ids, qs


def open_followers(edge: EdgeApp, sink: ProducerPort) -> tuple[PatchFollower, QueueVectorFollower]:
    """Both consumers for ``edge.pipeline`` (started: partitions assigned)."""
    boot = edge.pipeline.bootstrap_servers
    conf = consumer_conf(boot, "patches")
    holder: list[PatchFollower] = []
    # librdkafka's own view of each partition (leader, fetch state), for the stall reports
    conf["statistics.interval.ms"] = max(1000, int(edge.config.patch_stall_check_ms))
    conf["stats_cb"] = lambda stats_json: holder[0].on_stats(stats_json) if holder else None
    patches = PatchFollower(edge, Consumer(conf))
    holder.append(patches)
    dead = DeadLetters(sink, edge.service.codec, edge.pipeline.topics.dead_letters,
                       f"edge-{edge.config.region}")  # fmt: skip
    queues = QueueVectorFollower(edge, Consumer(consumer_conf(boot, "queues")), dead)
    if edge.config.view_mode == "writer":
        patches.start()
    queues.start()
    return patches, queues
