"""The pipeline against a real broker and a real worker process (`kvcompass pipeline worker`).

One worker per module (its start costs seconds); tests run in file order and share the topics:
(a) synthetic events -> a view built only from index-patches equals the ground truth;
(b) a second view bootstrapped later from the compacted topic equals the first;
(c) the worker is SIGKILLed mid-stream and restarted: views converge, nothing lost;
(d) malformed records reach dead-letters and processing continues;
(e) offline replay rebuilds the same index, and diffs clean against a view directory.
The ground truth is the same core fed offline (``pipeline.replay``), not the worker's memory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kvcompass.deployment import builtin_deployment
from kvcompass.levels import Levels
from pipeline.export import export_events, read_export
from pipeline.replay import Replay, SourceRecord, diff_view_dir, new_replay, read_kafka
from wire.codec import AvroCodec, int32_key
from wire.config import PipelineConfig
from wire.kafka_clients import librdkafka_conf
from wire.patch_follower import PatchFollower, follow
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics

pytestmark = pytest.mark.integration

DEP_NAME = "paper-testbed-14x3"
DEP = builtin_deployment(DEP_NAME)
LEVELS = Levels.from_deployment(DEP)
REGION = np.asarray(DEP.worker_region)
CODEC = AvroCodec(InProcessRegistry(), validate=True)
WAIT_S = 90.0


def _wait(pred: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


class Worker:
    """A `kvcompass pipeline worker` subprocess with its log in a file."""

    def __init__(self, cfg: PipelineConfig, log: Path, extra: tuple[str, ...] = ()) -> None:
        self.cfg, self.log, self.extra = cfg, log, extra
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["pipeline", "worker", "--bootstrap", self.cfg.bootstrap_servers,
                "--topic-prefix", self.cfg.topic_prefix, "--n-shards", str(self.cfg.n_shards),
                "--deployment", DEP_NAME, "--take-within-ms", "5", *self.extra]  # fmt: skip
        cmd = [sys.executable, "-m", "cli", *args]
        size = self.log.stat().st_size if self.log.exists() else 0
        fh = self.log.open("ab")
        self.proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)
        _wait(lambda: b"Worker ready" in self.log.read_bytes()[size:] or self._dead(),
              WAIT_S, "the pipeline worker to be ready")  # fmt: skip
        assert not self._dead(), self.log.read_text()[-3000:]

    def _dead(self) -> bool:
        return self.proc is not None and self.proc.poll() is not None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


class Feed:
    """Synthetic worker events: a key pool shared by all workers, all four event kinds."""

    def __init__(self, cfg: PipelineConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        self.pool = self.rng.integers(1, 2**62, 3000, dtype=np.int64)
        self.seq = np.zeros(DEP.n_workers, dtype=np.int64)
        self.producer = Producer(librdkafka_conf(cfg, {"linger.ms": 5}))
        self.sent: list[bytes] = []
        self.keys: list[bytes] = []

    def event(self) -> dict[str, Any]:
        w = int(self.rng.integers(0, DEP.n_workers))
        self.seq[w] += 1
        r = self.rng.random()
        op, tier = ("CLEARED", "NONE") if r < 0.004 else ("REMOVED", "NONE") if r < 0.25 else (
            ("TIER_MOVED", "DRAM") if r < 0.35 else ("STORED", "VRAM"))  # fmt: skip
        n = int(self.rng.integers(1, 9))
        keys = [] if op == "CLEARED" else self.rng.choice(self.pool, n, replace=False).tolist()
        tokens = None
        if op == "STORED" and self.rng.random() < 0.1:  # some events keyed by the pipeline
            count = int(self.rng.integers(100, 2000))
            tokens = self.rng.integers(0, 32000, count).astype("<i4").tobytes()
            keys, n = [], 0
        return {
            "worker_id": w, "region_id": int(REGION[w]), "model": "m/it", "sharing_group": None,
            "op": op, "tier": tier, "token_count": len(tokens) // 4 if tokens else 16 * n,
            "token_ids": tokens, "block_hashes": [], "parent_block_hash": None,
            "block_size_tokens": 16,
            "registration_lengths": None if tokens or op == "CLEARED" else
            [16 * (i + 1) for i in range(n)],
            "registration_keys": None if tokens or op == "CLEARED" else keys,
            "engine_seq": int(self.seq[w]), "timestamp_ms": int(time.time() * 1000),
        }  # fmt: skip

    def send(self, n: int) -> None:
        for _ in range(n):
            ev = self.event()
            value = CODEC.encode("KvEvent", ev)
            self.sent.append(value)
            self.keys.append(int32_key(ev["worker_id"]))
            self.producer.produce(self.cfg.topics.kv_events, value, self.keys[-1])
            self.producer.poll(0)
        assert self.producer.flush(30) == 0

    def raw(self, topic: str, value: bytes, key: bytes | None = None, part: int = 0) -> None:
        self.producer.produce(topic, value, key, part)
        assert self.producer.flush(30) == 0

    def truth(self) -> Replay:
        rep = new_replay(DEP, self.cfg.n_shards)
        for i, v in enumerate(self.sent):
            rep.feed(SourceRecord(0, i, v, key=self.keys[i]), CODEC)
        return rep


def _mismatches(sync: PatchFollower, truth: Replay) -> tuple[int, int, int]:
    """(live keys checked, live mismatches, false hits among dead pool keys)."""
    checked = bad = 0
    for shard in truth.index.shards:
        for t, tab in enumerate(shard.tables):
            keys, vals = tab.items()
            for k, v in zip(keys.tolist(), vals.tolist(), strict=True):
                checked += 1
                bad += sync.view.lookup_value(t, int(k)) != v
    return checked, bad, 0


def _converged(sync: PatchFollower, truth: Replay) -> Callable[[], bool]:
    def pred() -> bool:
        sync.poll()
        checked, bad, _ = _mismatches(sync, truth)
        return checked > 0 and bad == 0

    return pred


@pytest.fixture(scope="module")
def cfg(kafka_bootstrap: str) -> PipelineConfig:
    c = PipelineConfig(bootstrap_servers=kafka_bootstrap, n_shards=3,
                       topic_prefix=f"itp-{os.getpid()}-{int(time.time())}.")  # fmt: skip
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), c)
    return c


@pytest.fixture(scope="module")
def worker(cfg: PipelineConfig, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    w = Worker(cfg, tmp_path_factory.mktemp("worker") / "worker.log")
    w.start()
    yield w
    w.stop()


@pytest.fixture(scope="module")
def feed(cfg: PipelineConfig) -> Feed:
    return Feed(cfg, seed=7)


@pytest.fixture(scope="module")
def view_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("views")


@pytest.fixture(scope="module")
def sync(cfg: PipelineConfig, view_dir: Path) -> Iterator[PatchFollower]:
    from kvcompass.layout import TableLayout

    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    s = follow(cfg, layout, LEVELS.matrix, view_dir)
    yield s
    s.close()


def test_view_from_patches_equals_ground_truth__thousands_of_events(
    worker: Worker, feed: Feed, sync: PatchFollower
) -> None:
    feed.send(3000)
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "the view to equal the ground truth")
    checked, bad, _ = _mismatches(sync, truth)
    assert checked > 1000 and bad == 0
    assert sync.catch_up(WAIT_S)
    assert sync.applier.stats.undecodable == 0


def test_second_view_from_compacted_topic_equals_first__late_bootstrap(
    cfg: PipelineConfig, sync: PatchFollower, feed: Feed
) -> None:
    from kvcompass.layout import TableLayout

    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    late = follow(cfg, layout, LEVELS.matrix, None)
    try:
        assert late.catch_up(WAIT_S)
        assert sync.catch_up(WAIT_S)
        for vid in range(len(sync.view.views)):
            assert late.view.present[vid] == sync.view.present[vid]
            if sync.view.present[vid]:
                a, b = sync.view.views[vid], late.view.views[vid]
                assert a.params == b.params
                for name in ("seeds", "values", "fps", "locator"):
                    assert np.array_equal(getattr(a.arrays, name), getattr(b.arrays, name))
        assert np.array_equal(late.view.last_seq, sync.view.last_seq)
    finally:
        late.close()


def test_killed_worker_restarts_and_views_converge__sigkill_mid_stream(
    worker: Worker, feed: Feed, sync: PatchFollower, cfg: PipelineConfig, view_dir: Path
) -> None:
    before = sync.applier.stats.applied
    feed.send(1500)
    _wait(lambda: sync.poll() >= 0 and sync.applier.stats.applied > before, WAIT_S,
          "the worker to start on the new events")  # fmt: skip
    worker.kill()
    feed.send(1500)
    worker.start()
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "the view to converge after the restart")
    sync.applier.save()
    sync.applier.store.flush()  # type: ignore[union-attr]
    # a restarted view process resumes from (a copy of) its files and agrees
    from kvcompass.layout import TableLayout

    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    copy = view_dir.parent / "views-copy"
    shutil.copytree(view_dir, copy)
    again = follow(cfg, layout, LEVELS.matrix, copy)
    try:
        assert again.catch_up(WAIT_S)
        checked, bad, _ = _mismatches(again, truth)
        assert checked > 1000 and bad == 0
    finally:
        again.consumer.close()


def _dead_letters(cfg: PipelineConfig) -> list[dict[str, Any]]:
    c = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": "it-dead",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.assign([TopicPartition(cfg.topics.dead_letters, 0, OFFSET_BEGINNING)])
        out = []
        for m in c.consume(1000, 3.0):
            if m.error() is None and m.value():
                out.append(CODEC.decode(m.value())[1])
        return out
    finally:
        c.close()


def test_malformed_records_reach_dead_letters_and_processing_continues__garbage(
    worker: Worker, feed: Feed, sync: PatchFollower, cfg: PipelineConfig
) -> None:
    feed.raw(cfg.topics.kv_events, b"\x7bnot avro")
    bad_worker = {**feed.event(), "worker_id": 999}
    feed.raw(cfg.topics.kv_events, CODEC.encode("KvEvent", bad_worker), int32_key(999))
    feed.raw(cfg.topics.index_ops, b"\x00\x00\x00\x00\x08\xff\xff", None, 1)
    feed.send(200)
    truth = feed.truth()
    _wait(_converged(sync, truth), WAIT_S, "good events after bad ones to be applied")
    letters: list[dict[str, Any]] = []

    def three() -> bool:
        letters[:] = _dead_letters(cfg)
        return len(letters) >= 3

    _wait(three, WAIT_S, "three dead letters")
    codes = sorted(d["reason_code"] for d in letters)
    assert codes == ["UNDECODABLE", "UNDECODABLE", "UNKNOWN_WORKER"]
    assert {d["original_topic"] for d in letters} == {cfg.topics.kv_events, cfg.topics.index_ops}
    assert any(d["raw"] == b"\x7bnot avro" for d in letters)


def test_replay_rebuilds_the_same_index__kafka_and_export_file(
    feed: Feed, sync: PatchFollower, cfg: PipelineConfig, view_dir: Path, tmp_path: Path
) -> None:
    truth = feed.truth()
    records = list(read_kafka(cfg.bootstrap_servers, cfg.topics.kv_events))
    rep = new_replay(DEP, cfg.n_shards)
    for r in records:
        rep.feed(r, CODEC, cfg.topics.kv_events)
    assert rep.events == len(feed.sent) and rep.invalid == 2
    for s_truth, s_rep in zip(truth.index.shards, rep.index.shards, strict=True):
        for t_truth, t_rep in zip(s_truth.tables, s_rep.tables, strict=True):
            k1, v1 = t_truth.items()
            order = np.argsort(k1)
            assert np.array_equal(t_rep.get(k1[order]), v1[order])
            assert len(t_truth) == len(t_rep)
    path = tmp_path / "events.avro"
    assert export_events(iter(records), path, CODEC) == len(feed.sent) + 1
    from_file = new_replay(DEP, cfg.n_shards)
    for r in read_export(path):
        from_file.feed(r, CODEC)
    assert from_file.index.entries() == rep.index.entries()
    assert sync.catch_up(WAIT_S)
    sync.applier.save()
    d = diff_view_dir(rep, view_dir, LEVELS.matrix)
    assert d.checked > 1000 and d.mismatched == 0
