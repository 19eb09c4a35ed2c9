"""Topic specs of architecture §7 and the create/verify/refuse decision (no broker needed)."""

from __future__ import annotations

import pytest

from kvcompass.errors import ConfigError
from wire.config import PipelineConfig
from wire.topics import ExistingTopic, TopicSpec, plan_topics, topic_specs


def _as_existing(specs: tuple[TopicSpec, ...]) -> dict[str, ExistingTopic]:
    return {s.name: ExistingTopic(s.name, s.partitions, dict(s.configs)) for s in specs}


def _by_name(specs: tuple[TopicSpec, ...]) -> dict[str, TopicSpec]:
    return {s.name: s for s in specs}


def test_specs_follow_design_table__prefixed_names() -> None:
    config = PipelineConfig(topic_prefix="t1.", n_shards=6, kv_events_partitions=3)
    specs = _by_name(topic_specs(config))
    assert list(specs) == [
        "t1.kv-events", "t1.index-ops", "t1.index-patches", "t1.queue-vectors",
        "t1.migrations", "t1.routing-decisions", "t1.dead-letters", "t1.index-snapshots",
    ]  # fmt: skip
    assert specs["t1.index-ops"].partitions == specs["t1.index-patches"].partitions == 6
    assert specs["t1.kv-events"].partitions == 3
    assert specs["t1.dead-letters"].partitions == 1
    assert specs["t1.index-patches"].configs["cleanup.policy"] == "compact"
    assert specs["t1.queue-vectors"].configs["compression.type"] == "uncompressed"
    assert specs["t1.queue-vectors"].configs["retention.ms"] == str(10 * 60_000)
    assert all(s.replication_factor == 1 for s in specs.values())


def test_missing_topics_are_created__empty_broker() -> None:
    specs = topic_specs(PipelineConfig())
    plan = plan_topics(specs, {})
    assert plan.create == specs
    assert plan.drift == plan.refused == ()


def test_nothing_to_do__matching_topics() -> None:
    specs = topic_specs(PipelineConfig())
    plan = plan_topics(specs, _as_existing(specs))
    assert plan.create == plan.drift == plan.refused == ()


@pytest.mark.parametrize("topic", ["index-ops", "index-patches"])
def test_shard_topic_with_other_partition_count_is_refused__n_mismatch(topic: str) -> None:
    specs = topic_specs(PipelineConfig(n_shards=4))
    existing = _as_existing(specs)
    existing[topic] = ExistingTopic(topic, 8, existing[topic].configs)
    plan = plan_topics(specs, existing)
    assert [(d.topic, d.item, d.expected, d.actual) for d in plan.refused] == [
        (topic, "partitions", "4", "8")
    ]


def test_uncompacted_patch_topic_is_refused__cleanup_policy() -> None:
    specs = topic_specs(PipelineConfig())
    existing = _as_existing(specs)
    configs = {**existing["index-patches"].configs, "cleanup.policy": "delete"}
    existing["index-patches"] = ExistingTopic("index-patches", 4, configs)
    plan = plan_topics(specs, existing)
    assert [(d.item, d.actual) for d in plan.refused] == [("cleanup.policy", "delete")]


def test_other_differences_are_drift__retention_and_partitions() -> None:
    specs = topic_specs(PipelineConfig())
    existing = _as_existing(specs)
    existing["kv-events"] = ExistingTopic(
        "kv-events", 12, {**existing["kv-events"].configs, "retention.ms": "1"}
    )
    plan = plan_topics(specs, existing)
    assert plan.refused == ()
    assert {(d.item, d.expected, d.actual) for d in plan.drift} == {
        ("partitions", "4", "12"),
        ("retention.ms", str(7 * 86_400_000), "1"),
    }
    assert "kv-events: partitions expected 4, got 12" in {str(d) for d in plan.drift}


def test_adopt_retention__broker_keeps_less_checkpoints_more_often_or_refuses() -> None:
    from wire.topics import Drift, adopt_retention

    cfg = PipelineConfig(topic_prefix="r.")  # period 60 s, margin 10 min, retention 1 h
    same, note = adopt_retention(cfg, [Drift("r.index-ops", "retention.ms", "3600000", "-1")])
    assert same is cfg and note == ""
    short = Drift("r.index-ops", "retention.ms", "3600000", str(640_000))  # < 60 s + 10 min
    adopted, note = adopt_retention(cfg, [short])
    assert (adopted.index_ops_retention_ms, adopted.checkpoint_period_ms) == (640_000, 20_000)
    assert "checkpointing every 20000 ms instead of 60000 ms" in note
    five_min = Drift("r.index-ops", "retention.ms", "3600000", str(300_000))  # issue 35 item 9
    adopted, note = adopt_retention(cfg, [five_min])
    assert (adopted.checkpoint_period_ms, adopted.checkpoint_margin_ms) == (60_000, 150_000)
    assert note.endswith(
        "checkpointing every 60000 ms instead of 60000 ms and a margin of 150000 ms"
    )
    tiny = Drift("r.index-ops", "retention.ms", "3600000", str(3_000))
    with pytest.raises(ConfigError, match=r"retention.ms on the broker is 3000, expected > "):
        adopt_retention(cfg, [tiny])
