"""Hostile input against a real broker and a real worker: nothing accepted is lost or skipped.

Tests run in file order on one worker and one set of topics:
(a) a ~1 MB garbage record on kv-events, then valid events: one bounded dead letter (length and
    SHA-256 of the whole value), every valid event applied;
(b) a record whose dead letter the broker refuses (dead-letters' max.message.bytes lowered):
    rechunk holds, no offset is committed past the record, nothing after it is applied; once
    the topic accepts the dead letter again, processing resumes and everything is applied;
(c) a restart after a crash and after index-ops records were deleted (retention, here
    ``delete_records``) that no checkpoint covers (checkpoints are off in this module): the
    shard rebuilds itself from kv-events (issue 26 item 3; before: it refused and stayed frozen)
    and every view converges to the truth, a fresh epoch published;
(d) SIGTERM writes a final checkpoint of every shard, covering all of index-ops;
(e) a wrong Kafka key, a stale duplicate (lower engine_seq) and a negative length are
    dead-lettered with their reasons; view == truth == ``kvcompass replay``.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType  # (the package does not re-export)

from kvcompass.layout import TableLayout
from pipeline.rechunk_consumer import rechunk_group
from tests.integration.test_pipeline_worker import (
    DEP,
    LEVELS,
    WAIT_S,
    Feed,
    Worker,
    _converged,
    _dead_letters,
    _mismatches,
    _wait,
)
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.patch_follower import PatchFollower, follow
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics

pytestmark = pytest.mark.integration
CODEC_ = AvroCodec(InProcessRegistry())


@pytest.fixture(scope="module")
def cfg(kafka_bootstrap: str) -> PipelineConfig:
    c = PipelineConfig(bootstrap_servers=kafka_bootstrap, n_shards=3,
                       topic_prefix=f"ith-{os.getpid()}-{int(time.time())}.")  # fmt: skip
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), c)
    return c


@pytest.fixture(scope="module")
def worker(cfg: PipelineConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(cfg, tmp_path_factory.mktemp("worker") / "worker.log", ("--metrics-port", "0"))
    with pytest.MonkeyPatch.context() as env:  # no checkpoint: (c) is recovery from offset 0
        env.setenv("KVCOMPASS_CHECKPOINT_PERIOD_MS", str(24 * 3_600_000))
        env.setenv("KVCOMPASS_INDEX_OPS_RETENTION_MS", str(48 * 3_600_000))
        w.start()
        yield w
        w.stop()


@pytest.fixture(scope="module")
def feed(cfg: PipelineConfig) -> Feed:
    return Feed(cfg, seed=13)


@pytest.fixture(scope="module")
def sync(cfg: PipelineConfig) -> Iterator[PatchFollower]:
    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    s = follow(cfg, layout, LEVELS.matrix, None)
    yield s
    s.close()


def _high(cfg: PipelineConfig, topic: str, partition: int) -> int:
    c = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": "ith-watermarks"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        c.close()


def _committed(cfg: PipelineConfig, topic: str, partition: int) -> int:
    app = f"{cfg.topic_prefix}kvcompass-pipeline"  # kv-events: its rechunk stage's group
    group = rechunk_group(app) if topic == cfg.topics.kv_events else app
    c = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, partition)], timeout=10)[0].offset)
    finally:
        c.close()


def _set_max_message_bytes(admin: AdminClient, topic: str, value: int) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(value),
                    incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def _log(worker: Worker) -> str:
    return worker.log.read_text(errors="replace")


def test_one_megabyte_garbage_record_is_dead_lettered_and_valid_events_applied__poison(
    worker: Worker, feed: Feed, sync: PatchFollower, cfg: PipelineConfig
) -> None:
    garbage = b"\x7b" + np.random.default_rng(1).bytes(999_959)
    offset = _high(cfg, cfg.topics.kv_events, 0)
    feed.raw(cfg.topics.kv_events, garbage, b"\x00\x00\x00\x00", 0)
    feed.send(300)
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "every valid event after the poison to be applied")
    letters: list[dict[str, object]] = []

    def one() -> bool:
        letters[:] = _dead_letters(cfg)
        return len(letters) >= 1

    _wait(one, WAIT_S, "the poison's dead letter")
    assert len(letters) == 1
    d = letters[0]
    assert (d["reason_code"], d["original_partition"], d["original_offset"]) == (
        "UNDECODABLE", 0, offset)  # fmt: skip
    assert d["raw_size_bytes"] == len(garbage) and d["raw"] == garbage[: len(d["raw"])]  # type: ignore[arg-type]
    assert d["raw_sha256"] == hashlib.sha256(garbage).digest()
    checked, bad, _ = _mismatches(sync, truth)
    assert checked > 500 and bad == 0
    print(
        f"poison: 1 dead letter of {len(CODEC_.encode('DeadLetter', d))} bytes for a "
        f"{len(garbage)}-byte record; {checked} live entries checked, {bad} mismatched"
    )


def test_refused_dead_letter_holds_the_partition_then_resumes__broker_refuses(
    worker: Worker, feed: Feed, sync: PatchFollower, cfg: PipelineConfig, kafka_admin: AdminClient
) -> None:
    before = len(_dead_letters(cfg))
    _set_max_message_bytes(kafka_admin, cfg.topics.dead_letters, 300)
    try:
        poison_at = _high(cfg, cfg.topics.kv_events, 0)
        feed.raw(cfg.topics.kv_events, b"\x7b" + b"z" * 400, b"\x00\x00\x00\x00", 0)
        feed.send(300)
        _wait(lambda: _log(worker).count("rechunk held (attempt") >= 2, WAIT_S,
              "rechunk to hold after the refused dead letter")  # fmt: skip
        assert "MSG_SIZE_TOO_LARGE" in _log(worker)
        held_at = _committed(cfg, cfg.topics.kv_events, 0)
        assert held_at <= poison_at
        assert len(_dead_letters(cfg)) == before
        sync.poll()
        assert _mismatches(sync, feed.truth())[1] > 0  # the events after it are not applied
    finally:
        _set_max_message_bytes(kafka_admin, cfg.topics.dead_letters, 1_048_588)
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "processing to resume once the topic accepts it")
    _wait(lambda: "rechunk resumed" in _log(worker), WAIT_S, "the resumption to be logged")
    letters = _dead_letters(cfg)
    assert len(letters) == before + 1 and letters[-1]["original_offset"] == poison_at
    _wait(lambda: _committed(cfg, cfg.topics.kv_events, 0) > poison_at, WAIT_S,
          "the offset to be committed past the record once it is dead-lettered")  # fmt: skip
    attempts = _log(worker).count("rechunk held (attempt")
    print(
        f"refused dead letter: held after {attempts} failed attempts, committed {held_at} <= "
        f"poison offset {poison_at}; resumed, 1 dead letter, views converged"
    )


def test_restart_after_deleted_index_ops_rebuilds_the_shard_from_kv_events__retention(
    worker: Worker, feed: Feed, sync: PatchFollower, cfg: PipelineConfig, kafka_admin: AdminClient,
    tmp_path: Path,
) -> None:  # fmt: skip
    assert sync.catch_up(WAIT_S)
    assert _mismatches(sync, feed.truth())[1] == 0
    seq_before = int(sync.view.last_seq[0])
    worker.kill()  # a crash: no final checkpoint (and periodic ones are off in this module)
    high = _high(cfg, cfg.topics.index_ops, 0)
    assert high > 2
    futs = kafka_admin.delete_records([TopicPartition(cfg.topics.index_ops, 0, high // 2)])
    for fut in futs.values():
        fut.result(30)
    worker.start()
    feed.send(300)
    _wait(lambda: "rebuilding it from" in _log(worker), WAIT_S, "shard 0 to rebuild")
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "every shard, 0 included, to equal the truth")
    log = _log(worker)
    assert "RecoveryRefused" not in log and "maintain[0] held" not in log
    assert int(sync.view.last_seq[0]) > seq_before  # a fresh epoch was published
    metrics = _scrape(worker)
    assert _sample(metrics, "kvc_pipeline_rebuilds_total") >= 1
    checked, bad, _ = _mismatches(sync, truth)
    line = next(x for x in log.splitlines() if "self-healed" in x)
    print(f"retention: index-ops[0] records below {high // 2} of {high} deleted; {line.strip()}; "
          f"{checked} live entries checked, {bad} mismatched")  # fmt: skip


def test_graceful_stop_writes_a_final_checkpoint_of_every_shard__sigterm(
    worker: Worker, feed: Feed, cfg: PipelineConfig
) -> None:
    from pipeline.checkpoint import read_records
    from pipeline.reads import read_partition

    feed.send(100)
    time.sleep(3)
    worker.stop()  # SIGTERM; checkpoints are otherwise off in this module
    assert worker.proc is not None and worker.proc.returncode == 0, _log(worker)[-3000:]
    assert "final checkpoints of shards [0, 1, 2] written" in _log(worker)
    for s in range(cfg.n_shards):
        raws = read_partition(cfg, cfg.topics.index_snapshots, s)
        snap = read_records(CODEC_, [(r.key, r.value) for r in raws])[0]
        assert snap is not None and snap.covered_offset == _high(cfg, cfg.topics.index_ops, s)
    worker.start()  # the module fixture stops it again


def _scrape(worker: Worker) -> str:
    import re
    import urllib.request

    ports = re.findall(r"pipeline metrics on http://127\.0\.0\.1:(\d+)/metrics", _log(worker))
    with urllib.request.urlopen(f"http://127.0.0.1:{ports[-1]}/metrics", timeout=10) as r:
        return str(r.read().decode())


def _sample(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in the exposition")


def _shard_mismatches(sync: PatchFollower, truth: object, shards: tuple[int, ...]) -> int:
    bad = 0
    for s in shards:
        shard = truth.index.shards[s]  # type: ignore[attr-defined]
        for t, tab in enumerate(shard.tables):
            keys, vals = tab.items()
            for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
                bad += sync.view.lookup_value(t, int(k)) != v
    return bad


def test_wrong_key_late_event_and_negative_lengths_are_dead_lettered__order_per_worker(
    worker: Worker, feed: Feed, sync: PatchFollower, cfg: PipelineConfig
) -> None:
    """(e) Issue 26 item 5 on the real broker: a worker's event under another worker's key, a
    stale copy of an earlier event (lower engine_seq), and negative lengths are dead-lettered
    with their reasons; the view equals both the truth and ``kvcompass replay`` of the topic."""
    from pipeline.replay import new_replay, read_kafka
    from wire.codec import int32_key

    before = len(_dead_letters(cfg))
    feed.send(100)
    workers = [int(CODEC_.decode(v)[1]["worker_id"]) for v in feed.sent[-100:]]
    i = next(j for j in range(99) if workers[j] in workers[j + 1 :])  # w has a later event
    old, w = feed.sent[-100 + i], workers[i]
    stray = {**CODEC_.decode(feed.sent[-1])[1]}
    # partition -1: the producer's partitioner, as for every event of that key (one partition)
    feed.raw(cfg.topics.kv_events, feed.sent[-1], int32_key((stray["worker_id"] + 1) % 14), -1)
    feed.raw(cfg.topics.kv_events, old, int32_key(w), -1)  # a stale copy: late
    negative = {**stray, "token_count": -16, "engine_seq": 2**50}
    feed.raw(cfg.topics.kv_events, CODEC_.encode("KvEvent", negative),
             int32_key(stray["worker_id"]), -1)  # fmt: skip
    feed.send(50)
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "the view to equal the truth")

    def three() -> bool:
        return len(_dead_letters(cfg)) >= before + 3

    _wait(three, WAIT_S, "three more dead letters")
    reasons = [str(d["reason"]) for d in _dead_letters(cfg)[before:]]
    assert any(r.startswith("key: expected worker_id") for r in reasons), reasons
    assert any(r.startswith("engine_seq: expected >") for r in reasons), reasons
    assert any(r.startswith("token_count: expected >= 0; got -16") for r in reasons), reasons
    rebuild = new_replay(DEP, cfg.n_shards)
    for r in read_kafka(cfg, cfg.topics.kv_events):
        rebuild.feed(r, CODEC_, cfg.topics.kv_events)
    assert rebuild.late >= 1 and rebuild.invalid >= 2
    _wait(_converged(sync, rebuild), WAIT_S, "the view to equal kvcompass replay")
    print(f"order per worker: dead letters {reasons}; replay: {rebuild.events} applied, "
          f"{rebuild.late} late, {rebuild.invalid} invalid; view == truth == replay")  # fmt: skip
