"""``pipeline.rechunk_consumer`` on a real broker: takes come with their Kafka coordinates and
timestamps, offsets are committed only after the shell returned, a take the shell fails on is
not committed (read again by the next owner)."""

from __future__ import annotations

import asyncio
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from pipeline.progress import Hold, StepAbandoned
from pipeline.reads import Raw
from pipeline.rechunk_consumer import RechunkConsumer
from wire.config import PipelineConfig
from wire.topics import ensure_topics


class Shell:
    """Takes until ``want`` records arrived; ``fail_after``: abandon the take holding that one."""

    def __init__(self, want: int, fail_after: int | None = None) -> None:
        self.hold = Hold()
        self.got: list[Raw] = []
        self.want = want
        self.fail_after = fail_after

    async def rechunk_until_done(self, batch: list[Raw]) -> int:
        if self.fail_after is not None and len(self.got) + len(batch) > self.fail_after:
            self.hold.stop()
            raise StepAbandoned("stopping")
        self.got.extend(batch)
        if len(self.got) >= self.want:
            self.hold.stop()
        return len(batch)


def _produce(cfg: PipelineConfig, n: int) -> None:
    p = Producer({"bootstrap.servers": cfg.bootstrap_servers, "linger.ms": 1})
    for i in range(n):
        p.produce(cfg.topics.kv_events, f"v{i}".encode(), (i % 3).to_bytes(4, "big"), i % 2)
    assert p.flush(30) == 0


def _committed(cfg: PipelineConfig, group: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": cfg.bootstrap_servers, "group.id": group})
    try:
        tps = c.committed([TopicPartition(cfg.topics.kv_events, p) for p in range(2)], 10)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def _run(cfg: PipelineConfig, shell: Shell, group: str) -> None:
    consumer = RechunkConsumer(shell, cfg, group, take_max=7, take_within_s=0.01)
    asyncio.run(asyncio.wait_for(consumer.run(), 60))


def test_takes_carry_coordinates_and_commit_after_the_shell(
    kafka_admin: AdminClient, topic_prefix: str, kafka_bootstrap: str
) -> None:
    cfg = PipelineConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                         kv_events_partitions=2)  # fmt: skip
    ensure_topics(kafka_admin, cfg)
    _produce(cfg, 20)
    group = f"it-rechunk-{uuid.uuid4().hex[:8]}"
    shell = Shell(want=20)
    _run(cfg, shell, group)
    assert sorted(r.value for r in shell.got if r.value) == sorted(
        f"v{i}".encode() for i in range(20)
    )
    assert all(r.topic == cfg.topics.kv_events and r.timestamp_ms > 0 for r in shell.got)
    by_part = {p: [r.offset for r in shell.got if r.partition == p] for p in (0, 1)}
    assert by_part == {0: list(range(10)), 1: list(range(10))}
    assert _committed(cfg, group) == {0: 10, 1: 10}


def test_an_abandoned_take_is_not_committed__read_again(
    kafka_admin: AdminClient, topic_prefix: str, kafka_bootstrap: str
) -> None:
    cfg = PipelineConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix,
                         kv_events_partitions=2)  # fmt: skip
    ensure_topics(kafka_admin, cfg)
    _produce(cfg, 20)
    group = f"it-rechunk-{uuid.uuid4().hex[:8]}"
    first = Shell(want=20, fail_after=10)
    _run(cfg, first, group)
    done = len(first.got)
    assert done <= 10
    again = Shell(want=20 - done)
    _run(cfg, again, group)  # the next owner starts after what was committed, nothing lost
    seen = {(r.partition, r.offset) for r in first.got + again.got}
    assert seen == {(p, o) for p in (0, 1) for o in range(10)}
