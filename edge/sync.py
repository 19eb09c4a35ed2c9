"""Kafka glue of the edge: views from ``index-patches``, queue estimates from ``queue-vectors``.

- ``open_followers`` builds the project's one ``index-patches`` follower
  (``wire.patch_follower.PatchFollower``) over the edge's own ``IndexView`` and ``ViewStore``,
  with hooks that turn what it reports into the edge's metrics (applied patches, consumer errors,
  undecodable records, stalls) and its view's age; ``EdgeApp.patch_follower`` holds it for
  ``/health``. ``edge.main`` runs it (``run``: progress saved every ``offsets_flush_period_ms``,
  the stall watch every ``patch_stall_check_ms``).
- ``QueueVectorFollower``: ``queue-vectors`` → the decider. Two reporters write there: the
  other regions' EDGES (``QueueVector`` v3, reporter "edge": the owner's booking of its
  workers, its forwards not landed, one-forward announcements; a record meant for another
  region, ``to_region_id``, is skipped) and the SIDECARS (reporter "": a region's load poll,
  used for a region only while no edge vector of it arrived within 10 Δ, since the owner's
  booking knows better; and the cache-state reports, degraded workers, which go to
  ``EdgeApp.cache_states`` from every region, the edge's own included). The newest ``seq`` is
  kept per (region, reporter); a ``seq`` or ``timestamp_ms`` more than Δ ahead of this edge's
  clock (both are the sender's clock) is refused before anything of the record is used, so the
  kept ``seq`` never exceeds what a sender could have produced; a record may speak only for its
  own region's workers. Bad records go to ``dead-letters`` with the reason
  (``wire.dead_letter.DeadLetters``).
- ``broadcast``: every Δ, this edge's own vector (``EdgeService.broadcast``).
Must not route or serve HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable
from typing import Any

import numpy as np
from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from edge.app import EdgeApp
from edge.records import EDGE_REPORTER
from kvcompass.decider import QueueVector
from wire.consumer_watch import ConsumerWatch
from wire.dead_letter import DeadLetters, reason_code_of
from wire.patch_follower import MAX_BATCH, FollowerHooks, PatchFollower, consumer_conf
from wire.producer import ProducerPort

log = logging.getLogger(__name__)


async def _consume(consumer: Any, timeout_s: float) -> list[Any]:
    msgs: list[Any] = await asyncio.to_thread(consumer.consume, MAX_BATCH, timeout_s)
    return msgs


async def _guarded(step: Awaitable[object], edge: EdgeApp, what: str) -> bool:
    """Run one poll; a failure (broker error, or a record it cannot use) is logged and counted,
    never fatal to the edge. False if it failed."""
    try:
        await step
        return True
    except KafkaException as exc:
        log.warning("%s consumer: %s", what, exc)
        edge.service.metrics.inc("errors_total", type=f"kafka-{what}")
        return False
    except Exception:  # keep serving; the log has the traceback
        log.exception("%s consumer step failed", what)
        edge.service.metrics.inc("errors_total", type=f"sync-{what}")
        return False


async def _pause(stop: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), 1.0)


LAG_TELL_PERIOD_MS = 1_000.0
"""How often the deciders get the view's observed event -> view lag P99 (cheap either way)."""


def _hooks(edge: EdgeApp) -> FollowerHooks:
    svc, topic = edge.service, edge.pipeline.patches_topic
    m = svc.metrics

    def applied(shard: int) -> None:
        now = svc.view_applied_ms = svc.clock_ms()
        m.inc("patches_applied_total")
        f = edge.patch_follower
        if f is not None and now - lag_told[0] >= LAG_TELL_PERIOD_MS:  # the observed allowance
            lag_told[0] = now
            p99 = f.applier.event_to_view.quantile(0.99)
            for d in svc.deciders.values():
                d.set_index_marks(f.applier.marks, p99)

    lag_told = [-math.inf]

    return FollowerHooks(
        applied=applied,
        consumer_error=lambda kind: m.inc("errors_total", type=kind),
        undecodable=lambda n: m.inc("dead_letters_total", n, topic=topic),
        stalled=lambda parts: m.inc("patch_stalls_total"),
    )


class QueueVectorFollower:
    """``queue-vectors`` → the decider (remote regions only, newest seq per reporter wins)."""

    def __init__(self, edge: EdgeApp, consumer: Any, dead_letters: DeadLetters) -> None:
        self.edge = edge
        self.consumer = consumer
        self.dead = dead_letters
        self.topic = edge.pipeline.topics.queue_vectors
        self.topics = edge.pipeline.mirrored(self.topic)
        """The local topic and its MirrorMaker 2 copies (``PipelineConfig.mirror_sources``)."""
        self.last_seq: dict[tuple[int, str], int] = {}
        """Newest seq per (region, reporter)."""
        self.edge_heard_ms: dict[int, float] = {}
        """When a vector of each region's edge last arrived (this edge's clock)."""
        self.period_ms = edge.service.decider.config.broadcast_period_ms
        self.watch: ConsumerWatch | None = None
        """The stall watch (``wire.consumer_watch``), set by ``start``."""

    def start(self) -> None:
        n = self.edge.pipeline.queue_vectors_partitions
        parts = [(t, p) for t in self.topics for p in range(n)]
        self.consumer.assign([TopicPartition(t, p, OFFSET_END) for t, p in parts])
        m = self.edge.service.metrics
        self.watch = ConsumerWatch(
            self.consumer, parts, "queue-vectors", lambda _: m.inc("queue_vector_stalls_total")
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
            reporter = str(rec.get("reporter", ""))
            vec = _checked(rec, svc.deployment.worker_region, edge=reporter == EDGE_REPORTER)
            _bounded(rec, svc.clock_ms(), svc.decider.config.max_clock_ahead_ms)
            if reporter != EDGE_REPORTER:
                became = self.edge.cache_states.report(
                    rec["bridged_worker_ids"], rec["cache_unknown_worker_ids"],
                    svc.deployment.n_workers, svc.clock_ms(),
                )  # fmt: skip
                for w in became:  # before the own-region skip: local edges learn it here too
                    log.warning("worker %d: its sidecar reports its cache unknown (degraded)", w)
                    svc.metrics.inc("cache_unknown_total", worker=w)
            return self._fold(rec, reporter, vec)
        except Exception as exc:  # every bad record is filed, none stops the consumer
            source = topic or self.topic
            self.dead.file(topic=source, partition=partition, offset=offset, key=key,
                           raw=value, reason_code=reason_code_of(exc), reason=str(exc)[:500],
                           now_ms=int(time.time() * 1000))  # fmt: skip
            svc.metrics.inc("dead_letters_total", topic=source)
            return False

    def _fold(self, rec: dict[str, Any], reporter: str, vec: QueueVector) -> bool:
        """Give a checked record to the decider (the core refuses what it cannot trust: a
        reading time ahead of this edge's clock, a queue above a day); True if applied."""
        svc = self.edge.service
        region = vec.region
        if region == svc.origin or rec.get("to_region_id", -1) not in (-1, svc.origin):
            return False
        if rec.get("announce", False):
            for w, arrive, work in vec.in_flight:
                svc.on_peer_forward(region, w, arrive, work)
            svc.metrics.inc("queue_vectors_total", reporter="announce")
            return True
        src = (region, reporter)
        if rec["seq"] < self.last_seq.get(src, -(2**62)):
            return False
        if reporter != EDGE_REPORTER and self._edge_heard(region):
            return False  # the owner's booking knows its workers better than a poll
        svc.on_vector(vec)
        self.last_seq[src] = rec["seq"]
        if reporter == EDGE_REPORTER:
            self.edge_heard_ms[region] = svc.clock_ms()
        svc.metrics.inc("queue_vectors_total", reporter=reporter or "sidecar")
        return True

    def _edge_heard(self, region: int) -> bool:
        svc = self.edge.service
        at = self.edge_heard_ms.get(region)
        return at is not None and svc.clock_ms() - at < 10.0 * self.period_ms

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until ``stop``; every ``patch_stall_check_ms`` the stall watch (the patch
        follower's period) checks that this consumer still reads what the broker has."""
        period_s = self.edge.config.patch_stall_check_ms / 1000.0
        checked = time.monotonic()
        while not stop.is_set():
            if not await _guarded(self._poll_once(), self.edge, "queue-vectors"):
                await _pause(stop)
            if self.watch is not None and time.monotonic() - checked >= period_s:
                check = asyncio.to_thread(self.watch.check)
                await _guarded(check, self.edge, "queue-vectors-watch")
                checked = time.monotonic()

    async def _poll_once(self) -> None:
        for m in await _consume(self.consumer, 0.05):
            if m.error() is None:
                if self.watch is not None:
                    self.watch.note(m.topic(), m.partition(), m.offset() + 1)
                self.handle(m.partition(), m.offset(), m.key(), m.value(), m.topic())

    def close(self) -> None:
        self.consumer.close()


def _checked(rec: dict[str, Any], worker_region: Any, edge: bool) -> QueueVector:
    """The record as a ``QueueVector`` after every check; raises with the reason."""
    from kvcompass.errors import InvalidInputError, UnknownWorkerError

    region = int(rec["region_id"])
    ids = np.asarray(rec["worker_ids"], dtype=np.int64)
    qs = np.asarray(rec["queue_ms"], dtype=np.float64)
    n_regions = int(worker_region.max()) + 1
    if not 0 <= region < n_regions:
        raise InvalidInputError(f"region_id: expected 0..{n_regions - 1}, got {region}")
    fw = np.asarray(rec.get("in_flight_worker_ids", []), dtype=np.int64)
    fa = [float(x) for x in rec.get("in_flight_arrive_ms", [])]
    fk = [float(x) for x in rec.get("in_flight_work_ms", [])]
    if ids.shape != qs.shape or (not ids.size and not edge) or not fw.size == len(fa) == len(fk):
        raise InvalidInputError(f"expected equal arrays (non-empty from a sidecar), got "
                                f"{ids.size} ids, {qs.size} values, {fw.size}/{len(fa)}/"
                                f"{len(fk)} in flight")  # fmt: skip
    n = worker_region.size
    if ids.size and (ids.min() < 0 or ids.max() >= n or (worker_region[ids] != region).any()):
        raise UnknownWorkerError(f"worker_ids: expected workers of region {region}, got "
                                 f"{ids.tolist()[:20]}")  # fmt: skip
    if fw.size and (fw.min() < 0 or fw.max() >= n):
        raise UnknownWorkerError(f"in_flight_worker_ids: expected ids < {n}, got "
                                 f"{fw.tolist()[:20]}")  # fmt: skip
    own = [int(w) for w in rec.get("bridged_worker_ids", [])]
    if any(not 0 <= w < n or int(worker_region[w]) != region for w in own):
        raise UnknownWorkerError(f"bridged_worker_ids: a region speaks only for its own "
                                 f"workers (region {region}), got {own[:20]}")  # fmt: skip
    if not all(math.isfinite(q) and q >= 0 for q in qs.tolist()):
        raise InvalidInputError("queue_ms: expected finite values >= 0")
    if not all(math.isfinite(x) for x in fa + fk):
        raise InvalidInputError("in_flight times: expected finite values")
    flying = tuple(zip(fw.tolist(), fa, fk, strict=True))
    return QueueVector(region, float(rec["timestamp_ms"]), ids, qs, flying)


def _bounded(rec: dict[str, Any], now_ms: float, ahead_ms: float) -> None:
    """Refuse a ``seq`` or ``timestamp_ms`` no sender could have produced yet (issue 35 item 1).

    Both reporters write their wall clock in ms as ``seq`` (``edge.records.vector_record``,
    ``workers.load_reporter``), so a value more than ``ahead_ms`` (Δ) past this edge's clock is
    forged or from a broken clock. Kept as the newest ``seq`` of its (region, reporter), one such
    record (``seq`` 2^62) used to make every later real report look old, freezing the region's
    load reports until restart; refused here, it is dead-lettered and never adopted, and a
    record within the bound can hold the newest ``seq`` at most ``ahead_ms`` past real time."""
    from kvcompass.errors import InvalidInputError

    for name in ("seq", "timestamp_ms"):
        value = rec[name]
        if not value <= now_ms + ahead_ms:
            raise InvalidInputError(
                f"{name}: expected at most this edge's clock + {ahead_ms:g} ms "
                f"({now_ms + ahead_ms:.0f}), got {value}: no sender's clock is that far ahead"
            )


async def broadcast(edge: EdgeApp, stop: asyncio.Event) -> None:
    """Every Δ (``RouterConfig.broadcast_period_ms``), this edge's vector to ``queue-vectors``."""
    period_s = edge.service.decider.config.broadcast_period_ms / 1000.0
    while not stop.is_set():
        await _guarded(_broadcast_once(edge), edge, "vector-broadcast")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), period_s)


async def _broadcast_once(edge: EdgeApp) -> None:
    edge.service.broadcast()


def open_followers(edge: EdgeApp, sink: ProducerPort) -> tuple[PatchFollower, QueueVectorFollower]:
    """Both consumers for ``edge.pipeline`` (the queue-vector one started; the patch follower
    started only by a view writer: a reader maps the writer's files)."""
    cfg = edge.pipeline
    patches = PatchFollower.open(
        cfg, edge.view, edge.service.codec, edge.store, topic=cfg.patches_topic,
        hooks=_hooks(edge), what="edge-patches", start=False,
        # librdkafka's own view of each partition (leader, fetch state), for the stall reports
        stats_interval_ms=int(edge.config.patch_stall_check_ms),
    )  # fmt: skip
    for d in edge.service.deciders.values():  # pending holders last until the view has them
        d.set_index_marks(patches.applier.marks)
    dead = DeadLetters(sink, edge.service.codec, cfg.topics.dead_letters,
                       f"edge-{edge.config.region}")  # fmt: skip
    queues = QueueVectorFollower(edge, Consumer(consumer_conf(cfg, "edge-queues")), dead)
    if edge.config.view_mode == "writer" and patches.start():  # resumed from view files
        edge.service.view_applied_ms = edge.service.clock_ms()
    queues.start()
    return patches, queues
