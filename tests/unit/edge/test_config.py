"""EdgeConfig: TOML tables, validation at construction (edge.config)."""

from __future__ import annotations

import pytest

from edge.config import EdgeConfig
from kvcompass.errors import ConfigError

TOML = """
[edge]
region = "eu"
port = 8081
wan-delay-scale = 0.5
relay_key = "0123456789abcdef0123456789abcdef"
[workers]
8 = "http://127.0.0.1:30008/"
9 = "http://127.0.0.1:30009"
[peers]
us = "http://127.0.0.1:8080"
[pipeline]
bootstrap_servers = "127.0.0.1:9092"
n_shards = 3
"""


def test_from_toml_text__tables_become_fields() -> None:
    cfg = EdgeConfig.from_toml_text(TOML)
    assert cfg.region == "eu" and cfg.port == 8081 and cfg.wan_delay_scale == 0.5
    assert cfg.worker_urls() == {8: "http://127.0.0.1:30008", 9: "http://127.0.0.1:30009"}
    assert cfg.peers == (("us", "http://127.0.0.1:8080"),)
    assert cfg.pipeline is not None and cfg.pipeline.n_shards == 3


def test_peers_without_a_relay_key__refused_with_what_to_set() -> None:
    without = "\n".join(line for line in TOML.splitlines() if "relay_key" not in line)
    with pytest.raises(ConfigError, match=r"set edge\.relay_key"):
        EdgeConfig.from_toml_text(without)
    with pytest.raises(ConfigError, match="at least 32 characters"):
        EdgeConfig.from_toml_text(TOML.replace("0123456789abcdef0123456789abcdef", "short"))


def test_from_toml_text__overrides_replace_file_values() -> None:
    cfg = EdgeConfig.from_toml_text(TOML, {"port": 9000, "host": None})
    assert cfg.port == 9000 and cfg.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("edge", "match"),
    [
        ({"region": "eu", "prot": 1}, "prot"),
        ({"region": ""}, "region"),
        ({"region": "eu", "port": 70000}, "port"),
        ({"region": "eu", "decision_sample_rate": 1.5}, "decision_sample_rate"),
        ({"region": "eu", "max_body_bytes": 0}, "max_body_bytes"),
        ({"region": "eu", "tokenizer": "spm"}, "tokenizer"),
        ({"region": "eu", "first_byte_timeout_ms": float("inf")}, "first_byte_timeout_ms"),
    ],
)
def test_from_mapping__bad_values_refused_with_the_field_named(
    edge: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        EdgeConfig.from_mapping(edge)


def test_from_mapping__bad_worker_table_refused() -> None:
    with pytest.raises(ConfigError, match="workers"):
        EdgeConfig.from_mapping({"region": "eu"}, {"x": "http://a"})
    with pytest.raises(ConfigError, match="URL"):
        EdgeConfig.from_mapping({"region": "eu"}, {"1": "ftp://a"})


def test_from_toml_text__not_toml_refused() -> None:
    with pytest.raises(ConfigError, match="TOML"):
        EdgeConfig.from_toml_text("[edge\nregion=")
