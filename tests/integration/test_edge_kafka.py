"""Edge processes against a real broker: views from index-patches, queues from queue-vectors.

An edge restarted mid-run resumes from its view files (offsets in their headers) without
re-reading the whole topic and answers identically; a second edge started late bootstraps from
the compacted topic to the same view; broadcast queue vectors reach the router and bad ones
become dead letters. Each edge runs the real lifecycle (``edge.main.run_edge``) in-process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from edge.app import EdgeApp
from edge.config import EdgeConfig
from edge.main import run_edge
from kvcompass.index import DiscoveryIndex, ShardPatch
from kvcompass.layout import TableLayout
from tests.integration import edge_cluster as ec
from wire.codec import AvroCodec, int32_key
from wire.config import PipelineConfig
from wire.patches import PatchSink
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class Maintenance:
    """The maintenance side in one object: a keyed index whose patches go to the topic."""

    def __init__(self, config: PipelineConfig) -> None:
        layout = TableLayout.for_regions([r.n_workers for r in ec.DEPLOYMENT.regions])
        self.index = DiscoveryIndex(layout, n_shards=config.n_shards, seed=3)
        self.producer = Producer({"bootstrap.servers": config.bootstrap_servers, "linger.ms": 2})
        registry = InProcessRegistry()
        self.sink = PatchSink(
            self.producer, config.topics.index_patches, registry.writer_id("IndexPatch")
        )
        self.offset = 0

    def send(self, patches: list[ShardPatch]) -> None:
        self.offset += 1
        self.sink.send(patches, [], self.offset, int(time.time() * 1000))
        assert self.producer.flush(30) == 0

    def register(self, worker: int, tokens: list[int], hasher: Any) -> None:
        reg = ec.LEVELS.registration_lengths(int(ec.DEPLOYMENT.worker_region[worker]))
        reg = reg[reg <= len(tokens)]
        self.send(self.index.register(worker, hasher.keys_at(np.asarray(tokens, np.int32), reg)))


def reader_files(edge: EdgeApp) -> list[str]:
    """For failure messages: the view files of ``edge``'s directory."""
    assert edge.config.view_dir is not None
    return sorted(p.name for p in Path(edge.config.view_dir).glob("*.kvview"))


def _config(pipe: PipelineConfig, view_dir: Path | None) -> EdgeConfig:
    return EdgeConfig(
        region="us", model=ec.MODEL, port=0, loads_poll_period_ms=0.0,
        view_dir=None if view_dir is None else str(view_dir), pipeline=pipe,
        offsets_flush_period_ms=50.0,
        # a consumer that stops fetching (wire.follower_watch) is assigned again within the wait
        patch_stall_check_ms=2_000.0,
    )  # fmt: skip


async def _start(cfg: EdgeConfig) -> tuple[EdgeApp, asyncio.Event, asyncio.Task[EdgeApp]]:
    stop = asyncio.Event()
    started: asyncio.Future[EdgeApp] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_edge(cfg, ec.DEPLOYMENT, stop=stop, started=started))
    edge = await asyncio.wait_for(started, 60)
    return edge, stop, task


def _answer(edge: EdgeApp, tokens: list[int]) -> tuple[int, list[int], list[int]]:
    ex = edge.service.decide("probe", np.asarray(tokens, np.int32))  # decided, not dispatched
    lk = ex.lookup
    return ex.decision.worker, lk.match.matched_tokens.tolist(), lk.match.tiers.tolist()


def _follower_state(edge: EdgeApp, tokens: list[int]) -> dict[str, Any]:
    """For failure messages: what ``edge``'s patch follower has read and applied."""
    f = edge.patch_follower
    return {
        "answer": _answer(edge, tokens),
        "stats": None if f is None else dataclasses.asdict(f.applier.stats),
        "next_offset": None if f is None else dict(f.applier.next_offset),
        "resumed": None if f is None else dict(f.resumed),
        "stalled": None if f is None else list(f.stalled),
        "rdkafka": None if f is None else {p: v.as_dict() for p, v in f.rdkafka.items()},
    }


async def _until(pred: Any, what: str, show: Any = None, seconds: float = 60.0) -> None:
    # Bounded. One clean-clone CI run waited over 30 s here (cause not established; a clean
    # clone compiles every numba kernel on first use, on a loaded 2-vCPU machine).
    for _ in range(int(seconds / 0.05)):
        if pred():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}" + (f": {show()}" if show else ""))


def test_restart_resumes_from_view_files__and_late_edge_bootstraps_same_view(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    maint = Maintenance(pipeline_config)
    p1, p2, p3 = ec.prompt(8000, 21), ec.prompt(2000, 22), ec.prompt(5000, 23)

    async def scenario() -> None:
        maint.send(maint.index.full_images())
        edge, stop, task = await _start(_config(pipeline_config, tmp_path / "a"))
        hasher = edge.service.discovery.hasher
        maint.register(2, p1, hasher)
        maint.register(0, p2, hasher)
        await _until(lambda: _answer(edge, p1)[1][2] == 7552, "edge A to see worker 2's prefix",
                     lambda: _follower_state(edge, p1))  # fmt: skip
        await _until(lambda: _answer(edge, p2)[1][0] == 1024, "edge A to see worker 0's prefix",
                     lambda: _follower_state(edge, p2))  # fmt: skip
        before = [_answer(edge, p) for p in (p1, p2, p3)]
        records_first_run = edge.patch_follower.applier.stats.records
        stop.set()
        await task

        maint.register(3, p3, hasher)  # written while edge A is down
        edge, stop, task = await _start(_config(pipeline_config, tmp_path / "a"))
        assert edge.patch_follower.resumed  # offsets came from the view files
        stats = edge.patch_follower.applier.stats
        assert 0 < stats.records < records_first_run  # only what it missed
        await _until(lambda: _answer(edge, p3)[1][3] > 0, "edge A to see the missed patch",
                     lambda: _follower_state(edge, p3))  # fmt: skip
        after = [_answer(edge, p) for p in (p1, p2)]
        assert after == before[:2]
        a_final = [_answer(edge, p) for p in (p1, p2, p3)]

        late, late_stop, late_task = await _start(_config(pipeline_config, tmp_path / "b"))
        assert not late.patch_follower.resumed  # no files: read the compacted topic
        assert [_answer(late, p) for p in (p1, p2, p3)] == a_final
        for s in (stop, late_stop):
            s.set()
        await task
        await late_task

    asyncio.run(scenario())


def test_follower_that_stops_reading__stall_logged_counted_and_partitions_assigned_again(
    kafka_admin: AdminClient,
    pipeline_config: PipelineConfig,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A patch consumer that silently stops reading (here: its assignment is dropped under it;
    after a broker restart a librdkafka consumer once kept ``leader=-1`` for minutes, fetching
    nothing and saying nothing) must not leave the view stale: the follower's stall check sees
    records on the broker it does not advance to, logs the follower's state, counts the stall and
    assigns the partitions again, and the patch written meanwhile is applied. Without the check
    the patch is never read."""
    ensure_topics(kafka_admin, pipeline_config)
    maint = Maintenance(pipeline_config)
    tokens = ec.prompt(8000, 51)

    async def scenario() -> None:
        maint.send(maint.index.full_images())
        cfg = dataclasses.replace(
            _config(pipeline_config, tmp_path / "v"), patch_stall_check_ms=200.0
        )
        edge, stop, task = await _start(cfg)
        follower = edge.patch_follower
        follower.consumer.unassign()  # reads nothing from now on, and reports no error
        maint.register(2, tokens, edge.service.discovery.hasher)
        await _until(
            lambda: _answer(edge, tokens)[1][2] == 7552,
            "the follower to notice the stall and apply the patch",
            lambda: _follower_state(edge, tokens),
        )
        assert edge.service.metrics.total("patch_stalls_total") >= 1
        reports = [
            r.getMessage() for r in caplog.records if "stalled on partitions" in r.getMessage()
        ]
        assert reports and "low_high" in reports[0], caplog.text
        stop.set()
        await task

    with caplog.at_level(logging.INFO, logger="edge.sync"):
        asyncio.run(scenario())


def test_queue_vectors__fold_into_router_and_bad_records_dead_lettered(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    codec = AvroCodec(InProcessRegistry())
    producer = Producer({"bootstrap.servers": pipeline_config.bootstrap_servers})
    topic = pipeline_config.topics.queue_vectors

    async def scenario() -> None:
        Maintenance(pipeline_config).send([])
        cfg = dataclasses.replace(_config(pipeline_config, None), view_dir=None)
        edge, stop, task = await _start(cfg)
        await asyncio.sleep(0.5)  # the follower starts at the end of the topic
        rec = {"region_id": 1, "worker_ids": [2], "queue_ms": [75.0], "seq": 1,
               "timestamp_ms": int(time.time() * 1000)}  # fmt: skip
        producer.produce(topic, codec.encode("QueueVector", rec), int32_key(1))
        producer.produce(topic, b"\x00garbage", int32_key(1))
        bad = {**rec, "worker_ids": [0], "seq": 2}  # worker 0 is in region us, not eu
        producer.produce(topic, codec.encode("QueueVector", bad), int32_key(1))
        assert producer.flush(30) == 0
        qv = edge.service.decider.router.queue_view
        m = edge.service.metrics
        await _until(lambda: m.get("dead_letters_total", topic=topic) == 2, "two dead letters")
        assert qv.queue_ms[2] == pytest.approx(75.0)
        assert m.total("queue_vectors_total") == 1
        stop.set()
        await task

    asyncio.run(scenario())


def test_queue_vector_consumer_that_stops_reading__watch_assigns_it_again(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    """The queue-vectors consumer gets the patch follower's stall watch (``wire.consumer_watch``):
    dropped from its partitions (as a ``leader=-1`` consumer reads nothing and says nothing), it
    is assigned again where it stood, and the vector written meanwhile is applied."""
    ensure_topics(kafka_admin, pipeline_config)
    codec = AvroCodec(InProcessRegistry())
    producer = Producer({"bootstrap.servers": pipeline_config.bootstrap_servers})
    topic = pipeline_config.topics.queue_vectors

    def vector(q: float) -> bytes:
        rec = {"region_id": 1, "worker_ids": [2], "queue_ms": [q], "seq": int(time.time() * 1000),
               "timestamp_ms": int(time.time() * 1000)}  # fmt: skip
        return codec.encode("QueueVector", rec)

    async def scenario() -> None:
        Maintenance(pipeline_config).send([])
        cfg = dataclasses.replace(_config(pipeline_config, None), view_dir=None,
                                  patch_stall_check_ms=200.0)  # fmt: skip
        edge, stop, task = await _start(cfg)
        await asyncio.sleep(0.5)  # the follower starts at the end of the topic
        qv = edge.service.decider.router.queue_view
        producer.produce(topic, vector(75.0), int32_key(1))
        assert producer.flush(30) == 0
        await _until(lambda: qv.queue_ms[2] == pytest.approx(75.0), "the first vector")
        edge.vector_follower.consumer.unassign()  # reads nothing from now on, says nothing
        await asyncio.sleep(0.1)
        producer.produce(topic, vector(33.0), int32_key(1))
        assert producer.flush(30) == 0
        f = edge.vector_follower

        def state() -> str:
            pos = f.consumer.position(f.consumer.assignment()) if f.consumer.assignment() else []
            return (
                f"queue {qv.queue_ms[2]}, last_seq {f.last_seq}, assigned "
                f"{[(t.partition, t.offset) for t in pos]}, stalled {f.watch.stalled}"
            )

        await _until(lambda: qv.queue_ms[2] < 75.0, "the watch to reassign and read the vector",
                     state, seconds=20.0)  # fmt: skip
        assert edge.service.metrics.total("queue_vector_stalls_total") >= 1
        stop.set()
        await task

    asyncio.run(scenario())


@pytest.mark.timeout(300)
def test_reader_edge_on_the_writers_files__same_answers_and_follows_updates(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig, tmp_path: Path
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    maint = Maintenance(pipeline_config)
    p1, p2 = ec.prompt(8000, 31), ec.prompt(5000, 32)

    async def scenario() -> None:
        maint.send(maint.index.full_images())
        writer, w_stop, w_task = await _start(_config(pipeline_config, tmp_path / "v"))
        hasher = writer.service.discovery.hasher
        maint.register(2, p1, hasher)
        # This wait timed out at 60 s in two clean-clone CI runs (2026-12-01, 2026-12-02) and
        # passes otherwise; the cause is not established. It waits up to 180 s and, if it still
        # fails, prints what the writer's follower applied so the next failure names the cause.
        await _until(
            lambda: _answer(writer, p1)[1][2] == 7552,
            "the writer to apply",
            lambda: _follower_state(writer, p1),
            seconds=180.0,
        )
        r_cfg = dataclasses.replace(_config(pipeline_config, tmp_path / "v"), view_mode="reader")
        reader, r_stop, r_task = await _start(r_cfg)
        assert reader.patch_follower is None  # reads files, not the patch topic
        assert _answer(reader, p1) == _answer(writer, p1), reader_files(reader)
        maint.register(3, p2, hasher)  # the writer applies it; the reader shares its pages
        await _until(lambda: _answer(writer, p2)[1][3] > 0, "the writer to apply the update")
        await _until(
            lambda: _answer(reader, p2) == _answer(writer, p2),
            "the reader to follow",
            lambda: (_answer(reader, p2), _answer(writer, p2), reader_files(reader)),
        )
        for s in (r_stop, w_stop):
            s.set()
        await r_task
        await w_task

    asyncio.run(scenario())


def test_mirrored_topics__patches_from_home_copy_and_queue_vectors_from_remote_copy(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    """Multi-region naming (MirrorMaker 2 ``DefaultReplicationPolicy``): an edge whose
    maintenance units write in cluster ``home`` reads ``home.<topic>``; queue vectors from
    region ``eu``'s cluster arrive as ``eu.<topic>``. The copies are written here directly, as
    MM2 would (same records, same partitions)."""
    p = pipeline_config.topic_prefix
    home = dataclasses.replace(pipeline_config, topic_prefix=f"home.{p}")
    eu = dataclasses.replace(pipeline_config, topic_prefix=f"eu.{p}")
    for c in (pipeline_config, home, eu):
        ensure_topics(kafka_admin, c)
    pipe = dataclasses.replace(pipeline_config, patches_source="home", mirror_sources=("eu",))
    assert pipe.patches_topic == home.topics.index_patches
    assert pipe.mirrored(pipe.topics.queue_vectors) == (
        pipeline_config.topics.queue_vectors, eu.topics.queue_vectors,
    )  # fmt: skip
    maint = Maintenance(home)
    codec = AvroCodec(InProcessRegistry())
    producer = Producer({"bootstrap.servers": pipeline_config.bootstrap_servers})
    tokens = ec.prompt(8000, 41)

    async def scenario() -> None:
        maint.send(maint.index.full_images())
        edge, stop, task = await _start(dataclasses.replace(_config(pipe, None), view_dir=None))
        maint.register(2, tokens, edge.service.discovery.hasher)
        await _until(lambda: _answer(edge, tokens)[1][2] == 7552, "the home copy's patches")
        rec = {"region_id": 1, "worker_ids": [2], "queue_ms": [75.0], "seq": 1,
               "timestamp_ms": int(time.time() * 1000)}  # fmt: skip
        producer.produce(eu.topics.queue_vectors, codec.encode("QueueVector", rec), int32_key(1))
        assert producer.flush(30) == 0
        qv = edge.service.decider.router.queue_view
        await _until(lambda: qv.queue_ms[2] == pytest.approx(75.0), "eu's queue vector copy")
        stop.set()
        await task

    asyncio.run(scenario())
