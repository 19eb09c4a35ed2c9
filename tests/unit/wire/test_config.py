"""PipelineConfig: defaults, topic names, construction from mappings and env, validation.

(Named test_pipeline_config.py, not test_config.py: the test tree has no __init__.py files, so
two test_config.py modules in different folders would collide under pytest's default import mode.)
"""

from __future__ import annotations

import pytest

from kvcompass.errors import ConfigError
from wire.config import PipelineConfig


def test_defaults_are_valid__local_broker() -> None:
    config = PipelineConfig()
    assert config.bootstrap_servers == "127.0.0.1:19092"
    assert config.topics.index_patches == "index-patches"
    assert len(config.topics.all()) == 8


def test_prefix_applies_to_every_topic__topic_names() -> None:
    names = PipelineConfig(topic_prefix="run-42.").topics.all()
    assert all(n.startswith("run-42.") for n in names)


def test_env_overrides_base__from_env() -> None:
    env = {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:29092", "KVCOMPASS_N_SHARDS": "8"}
    config = PipelineConfig.from_env(env, base={"n-shards": 2, "topic_prefix": "x."})
    assert (config.bootstrap_servers, config.n_shards, config.topic_prefix) == (
        "127.0.0.1:29092",
        8,
        "x.",
    )


def test_resolve__flag_over_env_over_file_over_default() -> None:
    file = {"n-shards": 2, "topic_prefix": "f.", "migrations_partitions": 3}
    env = {"KVCOMPASS_N_SHARDS": "8", "KVCOMPASS_TOPIC_PREFIX": "e."}
    c = PipelineConfig.resolve(file, env, {"n_shards": 16, "topic_prefix": None})
    assert (c.n_shards, c.topic_prefix, c.migrations_partitions) == (16, "e.", 3)
    assert PipelineConfig.resolve(None, {}, {}).n_shards == PipelineConfig().n_shards


def test_registry_url_empty_means_none__from_env() -> None:
    assert (
        PipelineConfig.from_env({"KVCOMPASS_SCHEMA_REGISTRY_URL": ""}).schema_registry_url is None
    )
    url = PipelineConfig.from_env({"KVCOMPASS_SCHEMA_REGISTRY_URL": "mock://a"}).schema_registry_url
    assert url == "mock://a"


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"n_shards": 0}, "n_shards: expected an int >= 1; got 0"),
        ({"topic_prefix": "bad prefix/"}, "topic_prefix"),
        ({"n_shardz": 3}, "got 'n_shardz'"),
        ({"n_shards": "four"}, "n_shards: expected an integer; got 'four'"),
        ({"index_ops_retention_ms": 0}, "index_ops_retention_ms"),
        ({"bootstrap_servers": " "}, "bootstrap_servers"),
    ],
)
def test_invalid_values_raise__from_mapping(values: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PipelineConfig.from_mapping(values)


def test_mirror_sources_and_patches_source__names_of_the_mm2_copies() -> None:
    c = PipelineConfig.from_mapping(
        {"topic_prefix": "x.", "mirror_sources": "eu-west-1, ap-south-1", "patches_source": "us"}
    )
    assert c.mirror_sources == ("eu-west-1", "ap-south-1")
    assert c.mirrored(c.topics.migrations) == (
        "x.migrations", "eu-west-1.x.migrations", "ap-south-1.x.migrations",
    )  # fmt: skip
    assert c.patches_topic == "us.x.index-patches"
    assert PipelineConfig().patches_topic == "index-patches"
    assert PipelineConfig.from_mapping({"mirror_sources": ["a"]}).mirror_sources == ("a",)
    for bad in ({"mirror_sources": "a,a"}, {"mirror_sources": ["a.b"]}, {"patches_source": "x y"}):
        with pytest.raises(ConfigError, match="alias"):
            PipelineConfig.from_mapping(bad)


def test_short_retention_implies_the_checkpointing__defaults_left_alone() -> None:
    """Issue 35 item 9: a 5-minute index-ops retention under the default config starts."""
    five = PipelineConfig.resolve({}, {"KVCOMPASS_INDEX_OPS_RETENTION_MS": "300000"}, {})
    assert (five.checkpoint_period_ms, five.checkpoint_margin_ms) == (60_000, 150_000)
    assert five.index_ops_retention_ms > five.checkpoint_period_ms + five.checkpoint_margin_ms
    assert "checkpointing every 60000 ms with a margin of 150000 ms" in five.checkpointing_note
    near = PipelineConfig(index_ops_retention_ms=640_000)  # the margin kept, the period shorter
    assert (near.checkpoint_period_ms, near.checkpoint_margin_ms) == (20_000, 600_000)
    assert PipelineConfig().checkpointing_note == ""
    with pytest.raises(ConfigError, match="3000 is too short to checkpoint within"):
        PipelineConfig(index_ops_retention_ms=3_000)
    with pytest.raises(ConfigError, match="expected keys"):  # derived, not a setting
        PipelineConfig.from_mapping({"checkpointing_note": "x"})


def test_index_ops_retention_must_exceed_checkpoint_period_plus_margin__rule() -> None:
    ok = PipelineConfig(
        index_ops_retention_ms=70_001, checkpoint_period_ms=60_000, checkpoint_margin_ms=10_000
    )
    assert ok.index_ops_retention_ms > ok.checkpoint_period_ms + ok.checkpoint_margin_ms
    with pytest.raises(ConfigError, match="checkpoint_period_ms \\+ checkpoint_margin_ms = 70000"):
        PipelineConfig(
            index_ops_retention_ms=70_000, checkpoint_period_ms=60_000, checkpoint_margin_ms=10_000
        )
    with pytest.raises(ConfigError, match=r"set both lower .* or leave both unset"):
        PipelineConfig(index_ops_retention_ms=300_000, checkpoint_period_ms=1_000)
    with pytest.raises(ConfigError, match="checkpoint_chunk_bytes"):
        PipelineConfig(checkpoint_chunk_bytes=2 * 1024 * 1024)
    assert (
        PipelineConfig.from_env({"KVCOMPASS_CHECKPOINT_PERIOD_MS": "1000"}).checkpoint_period_ms
        == 1000
    )
