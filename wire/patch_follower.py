"""The one ``index-patches`` follower: a view (and its files) kept current from the compacted topic.

Owns the confluent-kafka consumer around a ``PatchApplier``: restore the committed view files and
resume every partition from the offset stored in their headers (with no files, read the compacted
topic from the beginning: bootstrap), poll, say when the end offsets seen at some instant are
reached (``catch_up``), write progress into the view files (``save``), and watch that it still
reads what the broker has (``check_stall``, every ``stall_check_ms``): a partition with records
past the follower and no progress over a whole period is logged with the follower's offsets, the
broker's watermarks and librdkafka's own state of each partition (leader, fetch state, from its
statistics), reported through ``FollowerHooks.stalled``, and assigned again where the follower
stands (a librdkafka consumer once sat on ``leader=-1`` for minutes after a broker restart,
fetching nothing and reporting nothing; ``wire.follower_watch`` has the story).

The edge runs it on its event loop (``run``: the blocking consume in a worker thread, records
applied on the loop, between requests, so a lookup never sees a half-applied batch); tools, tests
and benchmarks call the blocking ``poll`` / ``catch_up``. What the shell counts (applied batches,
consumer errors, undecodable records, stalls) reaches it through ``FollowerHooks``.
Must not: route, serve HTTP or decide anything about the index (``IndexView`` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from kvcompass.index_view import IndexView
from kvcompass.layout import TableLayout
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.follower_watch import PartitionView, behind, partition_views, stalled
from wire.kafka_clients import librdkafka_conf
from wire.patch_applier import PatchApplier
from wire.registry import registry_from_url
from wire.view_files import ViewStore

MAX_BATCH = 5000
"""Records per consume call: a bootstrap reads the topic in steps this large."""
log = logging.getLogger(__name__)


def consumer_conf(config: PipelineConfig, what: str) -> dict[str, Any]:
    """A group-less-in-effect consumer (assign, never subscribe; offsets live in the view files)."""
    return librdkafka_conf(config, {
        "group.id": f"kvcompass-{what}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 10,
        "fetch.min.bytes": 1,
        # a stored offset past a recreated or truncated topic: re-read from the start
        "auto.offset.reset": "earliest",
    })  # fmt: skip


def _noop(*_: Any) -> None:
    return None


@dataclass(frozen=True, slots=True)
class FollowerHooks:
    """What the owning shell wants to hear (all optional; called on the polling thread of
    control: the event loop for ``run``, the caller for ``poll``)."""

    applied: Callable[[int], None] = _noop
    """A batch of shard ``s`` was applied to the view."""
    consumer_error: Callable[[str], None] = _noop
    """A consumer error (``patch-consumer``), a failed poll (``kafka-patches``) or a failed step
    (``sync-patches``, ``kafka-patches-watch``, ``sync-patches-watch``): the view only ages."""
    undecodable: Callable[[int], None] = _noop
    """``n`` more records could not be decoded (the applier skips them)."""
    stalled: Callable[[list[int]], None] = _noop
    """These partitions stalled (they are being assigned again)."""


class PatchFollower:
    """``index-patches`` → one ``IndexView`` (bootstrap, resume, progress in the view files)."""

    def __init__(
        self,
        applier: PatchApplier,
        consumer: Any,
        topic: str,
        *,
        config: PipelineConfig,
        hooks: FollowerHooks | None = None,
    ) -> None:
        self.applier = applier
        self.consumer = consumer
        self.topic = topic
        self.n_shards = applier.view.n_shards
        self.config = config
        self.hooks = hooks or FollowerHooks()
        self.resumed: dict[int, int] = {}
        self.stalled: list[int] = []
        """Partitions found stalled at the last check (empty: none)."""
        self.rdkafka: dict[int, PartitionView] = {}
        """librdkafka's state of each partition, from its latest statistics (``on_stats``)."""
        self._progress: dict[int, int] = {}
        self._undecodable = 0
        applier.on_apply = self.hooks.applied

    @classmethod
    def open(
        cls,
        config: PipelineConfig,
        view: IndexView,
        codec: AvroCodec,
        store: ViewStore | None = None,
        *,
        topic: str | None = None,
        hooks: FollowerHooks | None = None,
        stats_interval_ms: int = 0,
        what: str = "view",
        start: bool = True,
    ) -> PatchFollower:
        """A follower of ``topic`` (default ``config.topics.index_patches``) for ``view``; with
        ``stats_interval_ms`` librdkafka's statistics feed the stall reports; ``start``: restore
        and assign now."""
        schema_id = codec.registry.writer_id("IndexPatch")
        applier = PatchApplier(view, store, codec, schema_id)
        conf = consumer_conf(config, what)
        holder: list[PatchFollower] = []
        if stats_interval_ms > 0:
            conf["statistics.interval.ms"] = max(1000, stats_interval_ms)
            conf["stats_cb"] = lambda stats: holder[0].on_stats(stats) if holder else None
        follower = cls(applier, Consumer(conf), topic or config.topics.index_patches,
                       config=config, hooks=hooks)  # fmt: skip
        holder.append(follower)
        if start:
            follower.start()
        return follower

    @property
    def view(self) -> IndexView:
        return self.applier.view

    def on_stats(self, stats_json: str) -> None:
        """librdkafka's statistics callback (served inside ``consume``)."""
        self.rdkafka = partition_views(stats_json, self.topic)

    def start(self) -> dict[int, int]:
        """Restore view files and assign partitions; return the resumed offsets per shard."""
        self.resumed = self.applier.restore()
        tps = [TopicPartition(self.topic, s, self.resumed.get(s, OFFSET_BEGINNING))
               for s in range(self.n_shards)]  # fmt: skip
        self.consumer.assign(tps)
        return self.resumed

    # -- reading ----------------------------------------------------------------------------
    def feed(self, msgs: list[Any], full: bool) -> int:
        """Apply consumed messages (``full``: more may be waiting, so open batches stay open)."""
        n = 0
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.hooks.consumer_error("patch-consumer")
                continue
            self.applier.feed(m.partition(), m.offset(), m.value(), m.key())
            n += 1
        if not full:
            self.applier.idle()
        undecodable = self.applier.stats.undecodable
        if undecodable > self._undecodable:
            self.hooks.undecodable(undecodable - self._undecodable)
            self._undecodable = undecodable
        return n

    def poll(self, max_records: int = MAX_BATCH, timeout_s: float = 0.05) -> int:
        """Consume what is there (blocking, up to ``max_records``), apply it and write progress
        into the view files' headers (flushed by ``save``); the number of records read."""
        msgs = self.consumer.consume(max_records, timeout_s)
        n = self.feed(msgs, len(msgs) >= max_records)
        for path in self.applier.save():
            path.unlink(missing_ok=True)
        return n

    async def apoll(self, timeout_s: float = 0.05) -> int:
        """``poll`` for an event loop: consume in a worker thread, apply on the loop."""
        msgs: list[Any] = await asyncio.to_thread(self.consumer.consume, MAX_BATCH, timeout_s)
        return self.feed(msgs, len(msgs) >= MAX_BATCH)

    def save(self) -> None:
        """Progress into the view files; superseded epochs' files deleted."""
        for path in self.applier.save():
            path.unlink(missing_ok=True)
        if self.applier.store is not None:
            self.applier.store.flush()

    # -- catching up ------------------------------------------------------------------------
    def end_offsets(self, deadline: float) -> dict[int, int]:
        """High watermarks of every partition now (-1: nothing to read); a freshly created topic
        answers NOT_LEADER until its leader is elected, so retry until ``deadline``
        (``time.monotonic``)."""
        out = {}
        for s in range(self.n_shards):
            tp = TopicPartition(self.topic, s)
            while True:
                try:
                    low, high = self.consumer.get_watermark_offsets(tp, 5.0)
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            out[s] = int(high) if high > low else -1
        return out

    def caught_up(self, targets: dict[int, int]) -> bool:
        """Every partition read up to ``targets`` (records compaction removed count as read)."""
        have = self.progress()
        return all(have.get(s, self.resumed.get(s, -1)) >= t for s, t in targets.items())

    def catch_up(self, timeout_s: float = 30.0) -> bool:
        """Read (blocking) until the end offsets seen now are reached; False on timeout."""
        deadline = time.monotonic() + timeout_s
        targets = self.end_offsets(deadline)
        while time.monotonic() < deadline:
            self.poll()
            if self.caught_up(targets):
                self.applier.idle()
                self.save()
                return True
        return False

    async def acatch_up(self, timeout_s: float) -> bool:
        """``catch_up`` for an event loop (bootstrap or resume of an edge)."""
        deadline = time.monotonic() + timeout_s
        targets = await asyncio.to_thread(self.end_offsets, deadline)
        while time.monotonic() < deadline:
            await self.apoll()
            if self.caught_up(targets):
                self.applier.idle()
                self.save()
                return True
        return False

    def progress(self) -> dict[int, int]:
        """Partition -> next offset to read (-1: nothing read yet): what was fed to the applier,
        or the consumer's position when it is past that (records removed by compaction)."""
        positions = self.consumer.position(
            [TopicPartition(self.topic, s) for s in range(self.n_shards)]
        )
        out = {s: self.applier.next_offset.get(s, -1) for s in range(self.n_shards)}
        for tp in positions:
            out[tp.partition] = max(out[tp.partition], int(tp.offset))
        return out

    # -- stall watch ------------------------------------------------------------------------
    def _marks(self, timeout_s: float) -> tuple[dict[int, tuple[int, int]] | None, bool]:
        """(low, high) of every partition, asked of the broker now, and whether this follower's
        own consumer could ask. It asks the partition leaders, so a consumer that lost them
        cannot; then a fresh client asks (in the one real stall reproduced with only the own
        consumer asking, 151 s without reading, no stall was reported: what a failing own query
        gives). (None, False) if neither gets an answer (a broker that is down is not a stall of
        this follower)."""
        try:
            return _watermarks_of(self.consumer, self.topic, self.n_shards, timeout_s), True
        except KafkaException:
            pass
        fresh = Consumer(consumer_conf(self.config, "watch"))
        try:
            return _watermarks_of(fresh, self.topic, self.n_shards, timeout_s), False
        except KafkaException:
            return None, False
        finally:
            fresh.close()

    async def check_stall(self, period_s: float) -> list[int]:
        """Compare progress with the broker's end offsets (``wire.follower_watch.stalled``); on a
        stall, say everything known about it and assign the partitions again where the follower
        stands (a fresh start of librdkafka's partition state: leader lookup, fetch). Returns the
        stalled partitions. ``period_s``: the time since the last check (for the message)."""
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
                    "partition %s; assigning again", stuck, period_s, assignment,
                    "could" if own else "could NOT", state)  # fmt: skip
        self.hooks.stalled(stuck)
        self.stalled = stuck
        with contextlib.suppress(KafkaException):  # fresh metadata first: the leaders as of now
            await asyncio.to_thread(self.consumer.list_topics, self.topic, 2.0)
        start = {p: o if o >= 0 else self.resumed.get(p, OFFSET_BEGINNING) for p, o in now.items()}
        self.consumer.assign([TopicPartition(self.topic, p, o) for p, o in sorted(start.items())])
        return stuck

    # -- the edge's loop --------------------------------------------------------------------
    async def _step(self, step: Any, what: str) -> bool:
        """One poll or check; a failure is logged and reported, never fatal: the view only
        ages. False if it failed."""
        try:
            await step
            return True
        except KafkaException as exc:
            log.warning("%s consumer: %s", what, exc)
            self.hooks.consumer_error(f"kafka-{what}")
            return False
        except Exception:  # keep serving with the last good view; the log has the traceback
            log.exception("%s consumer step failed", what)
            self.hooks.consumer_error(f"sync-{what}")
            return False

    async def run(self, stop: asyncio.Event, save_period_s: float, stall_check_s: float) -> None:
        """Follow until ``stop``: poll, save every ``save_period_s``, check for a stall every
        ``stall_check_s``; save once more at the end."""
        saved_at = checked_at = time.monotonic()
        while not stop.is_set():
            if not await self._step(self.apoll(), "patches"):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)
            if time.monotonic() - saved_at >= save_period_s:
                self.save()
                saved_at = time.monotonic()
            if time.monotonic() - checked_at >= stall_check_s:
                await self._step(self.check_stall(stall_check_s), "patches-watch")
                checked_at = time.monotonic()
        self.save()

    def close(self) -> None:
        self.save()
        self.consumer.close()


def follow(
    config: PipelineConfig,
    layout: TableLayout,
    levels_matrix: Any,
    directory: Path | None = None,
) -> PatchFollower:
    """A fresh view of ``layout`` over ``directory`` (None: in memory), following
    ``config``'s patch topic from where its files left off (tools, tests, benchmarks)."""
    store = ViewStore(directory) if directory is not None else None
    if store is not None:
        view = IndexView(layout, levels_matrix, config.n_shards,
                         allocator=store.allocate, on_params=store.adopt)  # fmt: skip
    else:
        view = IndexView(layout, levels_matrix, config.n_shards)
    codec = AvroCodec(registry_from_url(config.schema_registry_url))
    return PatchFollower.open(config, view, codec, store)


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
