"""Against a real broker: topics of architecture §7 with the right partitions and configs, refusal
of a mismatched index-ops, Avro records through Kafka, and Faust's client (aiokafka) on this
broker."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from kvcompass.errors import ConfigError
from wire.codec import AvroCodec, PatchKind, decode_patch_key, encode_patch_key, int32_key
from wire.config import PipelineConfig
from wire.registry import InProcessRegistry
from wire.topics import ensure_topics, topic_specs

pytestmark = pytest.mark.integration


def _topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    (future,) = futures.values()
    return {k: str(v.value) for k, v in future.result(timeout=30).items()}


def test_topics_are_created_with_partitions_and_configs__fresh_prefix(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    names = pipeline_config.topics
    report = ensure_topics(kafka_admin, pipeline_config)
    assert set(report.created) == set(names.all())
    metadata = kafka_admin.list_topics(timeout=30)
    partitions = {
        s.name: len(metadata.topics[s.name].partitions) for s in topic_specs(pipeline_config)
    }
    assert partitions[names.index_ops] == partitions[names.index_patches] == 3
    assert partitions[names.dead_letters] == 1
    assert partitions[names.kv_events] == pipeline_config.kv_events_partitions
    patches = _topic_configs(kafka_admin, names.index_patches)
    assert patches["cleanup.policy"] == "compact"
    queues = _topic_configs(kafka_admin, names.queue_vectors)
    assert queues["compression.type"] == "uncompressed"
    assert queues["retention.ms"] == str(pipeline_config.queue_vectors_retention_ms)

    again = ensure_topics(kafka_admin, pipeline_config)
    assert again.created == ()
    assert set(again.existing) == set(names.all())
    assert again.drift == ()


def test_index_ops_with_other_shard_count_is_refused__existing_topics(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    other = PipelineConfig(
        bootstrap_servers=pipeline_config.bootstrap_servers,
        topic_prefix=pipeline_config.topic_prefix,
        n_shards=pipeline_config.n_shards + 2,
    )
    with pytest.raises(ConfigError, match="index-ops: partitions expected 5, got 3"):
        ensure_topics(kafka_admin, other)
    metadata = kafka_admin.list_topics(timeout=30)
    assert len(metadata.topics[pipeline_config.topics.index_ops].partitions) == 3


def test_avro_patches_round_trip_through_kafka__partition_by_shard(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    topic = pipeline_config.topics.index_patches
    codec = AvroCodec(InProcessRegistry(), validate=True)
    sent = [
        {"table": 1, "shard": shard, "epoch": 0, "kind": "BUCKET", "index": i,
         "image": bytes([i]) * 16, "seq": i, "source_offset": i, "timestamp_ms": 1_000 + i,
         "source_produced_ms": 900 + i}
        for shard in range(3)
        for i in range(5)
    ]  # fmt: skip
    producer = Producer({"bootstrap.servers": pipeline_config.bootstrap_servers, "linger.ms": 5})
    for rec in sent:
        key = encode_patch_key(rec["table"], rec["shard"], 0, PatchKind.BUCKET, rec["index"])
        producer.produce(topic, codec.encode("IndexPatch", rec), key, partition=rec["shard"])
    assert producer.flush(30) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": pipeline_config.bootstrap_servers,
            "group.id": f"it-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(3)])
    got: list[tuple[int, dict[str, object]]] = []
    try:
        for _ in range(300):  # bounded: at most ~30 s
            msg = consumer.poll(0.1)
            if msg is None or msg.error():
                if len(got) == len(sent):
                    break
                continue
            key = decode_patch_key(msg.key())
            name, record = codec.decode(msg.value())
            assert name == "IndexPatch"
            assert (key.shard, key.index) == (record["shard"], record["index"])
            got.append((msg.partition(), record))
    finally:
        consumer.close()
    assert sorted((r["shard"], r["index"]) for _, r in got) == sorted(
        (r["shard"], r["index"]) for r in sent
    )
    assert all(partition == record["shard"] for partition, record in got)
    assert [r for _, r in got if r["shard"] == 1] == [r for r in sent if r["shard"] == 1]


def test_aiokafka_group_round_trip__faust_client(
    kafka_admin: AdminClient, pipeline_config: PipelineConfig
) -> None:
    ensure_topics(kafka_admin, pipeline_config)
    topic = pipeline_config.topics.kv_events
    codec = AvroCodec(InProcessRegistry())
    event = {"worker_id": 5, "region_id": 0, "model": "m", "op": "CLEARED", "tier": "NONE",
             "token_count": 0, "engine_seq": 1, "timestamp_ms": 7}  # fmt: skip

    async def round_trip() -> tuple[str, dict[str, object]]:
        bootstrap = pipeline_config.bootstrap_servers
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            await producer.send_and_wait(topic, codec.encode("KvEvent", event), key=int32_key(5))
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            group_id=f"it-{uuid.uuid4().hex}",
        )
        await consumer.start()
        try:
            msg = await asyncio.wait_for(consumer.getone(), timeout=60)
            await consumer.commit()
        finally:
            await consumer.stop()
        assert msg.value is not None
        return codec.decode(msg.value)

    name, record = asyncio.run(round_trip())
    assert name == "KvEvent"
    assert (record["worker_id"], record["op"], record["token_ids"]) == (5, "CLEARED", None)


def test_up_is_idempotent__running_local_broker(kafka_broker: Any) -> None:
    if kafka_broker.local is None:
        pytest.skip(f"broker came from {kafka_broker.source}, not from LocalBroker")
    pid = kafka_broker.local.running_pid()
    assert kafka_broker.local.up(timeout_s=30) == kafka_broker.bootstrap
    status = kafka_broker.local.status()
    assert status["running"] is True
    assert status["pid"] == pid
    assert status["rss_kb"] > 0
