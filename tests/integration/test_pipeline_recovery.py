"""Bounded recovery on a real broker: checkpoint + ``index-ops`` tail (issue 16, item 1).

A worker checkpoints every shard (period 1 s), stops; the broker deletes every ``index-ops``
record each shard's latest checkpoint covers (``delete_records``, what retention does), more
events arrive while it is down; the restarted worker recovers every shard from its checkpoint
and the tail (no ``RecoveryRefused``), and the edge view equals a full rebuild from
``kv-events``.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kvcompass.layout import TableLayout
from pipeline.checkpoint import Snapshot, read_records
from pipeline.reads import read_partition
from pipeline.replay import new_replay, read_kafka
from tests.integration.test_pipeline_worker import (
    DEP,
    LEVELS,
    WAIT_S,
    Feed,
    Worker,
    _converged,
    _wait,
)
from wire.codec import AvroCodec
from wire.config import PipelineConfig
from wire.patch_follower import follow
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics

pytestmark = pytest.mark.integration
CODEC_ = AvroCodec(InProcessRegistry())
_REBUILT = re.compile(
    r"shard (\d+) rebuilt from checkpoint \d+ \((\d+) entries\) and (\d+) op runs "
    r"\(index-ops (\d+)\.\.(\d+)\) in ([0-9.]+) s"
)


def _checkpoint(cfg: PipelineConfig, shard: int) -> Snapshot | None:
    raws = read_partition(cfg.bootstrap_servers, cfg.topics.index_snapshots, shard)
    return read_records(CODEC_, [(r.key, r.value) for r in raws])[0]


def _low(cfg: PipelineConfig, shard: int) -> int:
    c = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": "itr-watermarks"})
    try:
        tp = TopicPartition(cfg.topics.index_ops, shard)
        return int(c.get_watermark_offsets(tp, timeout=10)[0])
    finally:
        c.close()


@pytest.mark.timeout(300)
def test_unit_recovers_from_checkpoint_after_old_segments_deleted__retention(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # fmt: skip
    cfg = PipelineConfig(bootstrap_servers=kafka_bootstrap, n_shards=3, checkpoint_period_ms=1000,
                         topic_prefix=f"itr-{os.getpid()}-{int(time.time())}.")  # fmt: skip
    ensure_topics(AdminClient({"bootstrap.servers": kafka_bootstrap}), cfg)
    monkeypatch.setenv("KVCOMPASS_CHECKPOINT_PERIOD_MS", "1000")  # the worker reads its env
    worker = Worker(cfg, tmp_path / "worker.log")
    feed = Feed(cfg, seed=21)
    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    (tmp_path / "views").mkdir()
    sync = follow(cfg, layout, LEVELS.matrix, tmp_path / "views")
    try:
        worker.start()
        feed.send(1500)
        snaps: dict[int, Snapshot] = {}

        def every_shard_checkpointed() -> bool:
            feed.send(20)  # a checkpoint is taken at the first batch after its period
            time.sleep(0.5)
            for s in range(cfg.n_shards):
                snap = _checkpoint(cfg, s)
                if snap is None or snap.covered_offset < 2:
                    return False
                snaps[s] = snap
            return True

        _wait(every_shard_checkpointed, WAIT_S, "a checkpoint of every shard")
        worker.stop()
        for s in range(cfg.n_shards):  # the latest may be newer than the one seen in the loop
            latest = _checkpoint(cfg, s)
            assert latest is not None and latest.entries > 0
            snaps[s] = latest
        parts = [TopicPartition(cfg.topics.index_ops, s, snaps[s].covered_offset)
                 for s in range(cfg.n_shards)]  # fmt: skip
        for fut in kafka_admin.delete_records(parts).values():
            fut.result(30)
        assert [_low(cfg, s) for s in range(cfg.n_shards)] == [
            snaps[s].covered_offset for s in range(cfg.n_shards)
        ]
        feed.send(400)  # the tail: arrives while the unit is down
        log_start = worker.log.stat().st_size
        worker.start()
        feed.send(200)
        rebuild = new_replay(DEP, cfg.n_shards)
        for r in read_kafka(cfg.bootstrap_servers, cfg.topics.kv_events):
            rebuild.feed(r, CODEC_, cfg.topics.kv_events)
        assert rebuild.events == len(feed.sent)
        _wait(_converged(sync, rebuild), WAIT_S, "the view to equal the full rebuild")
        assert sync.catch_up(WAIT_S)
        sync.applier.save()
        from pipeline.replay import diff_view_dir

        d = diff_view_dir(rebuild, tmp_path / "views", LEVELS.matrix)
        assert d.checked > 1000 and d.mismatched == 0 and d.missing_views == 0, d.examples
        log = worker.log.read_text(errors="replace")[log_start:]
        assert "RecoveryRefused" not in log
        rebuilt = {int(m[0]): m for m in _REBUILT.findall(log)}
        assert sorted(rebuilt) == list(range(cfg.n_shards)), log[-3000:]
        for s, (_, entries, runs, start, stop, secs) in sorted(rebuilt.items()):
            assert int(start) >= snaps[s].covered_offset  # only the tail was replayed
            print(f"shard {s}: recovered from a checkpoint of {entries} entries + {runs} op runs "
                  f"(index-ops {start}..{stop}) in {float(secs):.3f} s")  # fmt: skip
    finally:
        worker.stop()
        sync.close()
