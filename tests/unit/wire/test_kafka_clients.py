"""Security settings: ``PipelineConfig`` fields from env, validation, and the one mapping to each
library's settings (``wire.kafka_clients``)."""

from __future__ import annotations

import logging
import ssl
import subprocess
from pathlib import Path

import pytest

from kvcompass.errors import ConfigError
from wire.config import PipelineConfig
from wire.kafka_clients import RDKAFKA_LOGGER, aiokafka_kwargs, librdkafka_conf, ssl_context
from wire.kafka_secure import prepare

SCRAM = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_username": "alice",
    "sasl_password": "s3cret",
}


def test_from_env__security_fields_and_secret_not_in_repr() -> None:
    env = {f"KVCOMPASS_{k.upper()}": v for k, v in SCRAM.items()}
    env["KVCOMPASS_SSL_CHECK_HOSTNAME"] = "false"
    cfg = PipelineConfig.from_env(env)
    assert (cfg.security_protocol, cfg.sasl_mechanism, cfg.sasl_username) == (
        "SASL_SSL", "SCRAM-SHA-512", "alice"
    )  # fmt: skip
    assert cfg.sasl_password == "s3cret" and cfg.ssl_check_hostname is False
    assert "s3cret" not in repr(cfg)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"security_protocol": "TLS"}, "security_protocol: expected one of PLAINTEXT"),
        ({**SCRAM, "sasl_mechanism": "GSSAPI"}, "sasl_mechanism: expected one of PLAIN"),
        ({**SCRAM, "sasl_mechanism": "AWS_MSK_IAM"}, "MSK IAM) is not wired"),
        ({**SCRAM, "sasl_password": ""}, "expected both with SASL_SSL"),
        ({"sasl_username": "alice"}, "expected none with security_protocol PLAINTEXT"),
        ({"ssl_ca_location": "/ca.pem"}, "ssl_*: expected none"),
        ({"security_protocol": "SSL", "ssl_key_location": "/k"}, "expected both (mutual TLS)"),
        ({"ssl_check_hostname": "maybe"}, "ssl_check_hostname: expected true or false"),
    ],
)
def test_security_refused__inconsistent_settings(values: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        PipelineConfig.from_mapping(values)
    assert needle in str(err.value)


def test_librdkafka_conf__plaintext_is_only_the_address_and_the_logger() -> None:
    conf = librdkafka_conf(PipelineConfig(bootstrap_servers="b:1"), {"group.id": "g"})
    assert conf == {"bootstrap.servers": "b:1", "group.id": "g",
                    "logger": logging.getLogger(RDKAFKA_LOGGER)}  # fmt: skip


def test_librdkafka_conf__sasl_ssl_with_ca() -> None:
    cfg = PipelineConfig(**SCRAM, ssl_ca_location="/etc/ca.pem")
    conf = librdkafka_conf(cfg)
    assert conf["security.protocol"] == "sasl_ssl"
    assert (conf["sasl.mechanism"], conf["sasl.username"], conf["sasl.password"]) == (
        "SCRAM-SHA-512", "alice", "s3cret"
    )  # fmt: skip
    assert conf["ssl.ca.location"] == "/etc/ca.pem"
    assert conf["ssl.endpoint.identification.algorithm"] == "https"


def test_aiokafka_kwargs__sasl_plaintext_has_no_tls() -> None:
    cfg = PipelineConfig(**{**SCRAM, "security_protocol": "SASL_PLAINTEXT"})
    kw = aiokafka_kwargs(cfg)
    assert kw == {"bootstrap_servers": cfg.bootstrap_servers, "security_protocol": "SASL_PLAINTEXT",
                  "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice",
                  "sasl_plain_password": "s3cret"}  # fmt: skip


def test_ssl_context__trusts_the_given_ca_and_checks_host_names(tmp_path: Path) -> None:
    try:
        files = prepare(tmp_path)
    except (OSError, subprocess.SubprocessError) as exc:  # pragma: no cover
        pytest.skip(f"openssl: {exc}")
    cfg = files.client_config("127.0.0.1:9")
    ctx = ssl_context(cfg)
    assert isinstance(ctx, ssl.SSLContext) and ctx.check_hostname
    assert any("kvcompass local CA" in str(c.get("subject")) for c in ctx.get_ca_certs())
    assert aiokafka_kwargs(cfg)["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert prepare(tmp_path).role_passwords == files.role_passwords  # made once, reused
    assert len({pw for _, pw in files.role_passwords}) == 4  # one user per role, own password
    assert cfg.sasl_username == "kvcompass-admin"
    assert files.client_config("b:1", "sidecar").sasl_username == "kvcompass-sidecar"
    assert oct(files.directory.stat().st_mode & 0o777) == "0o700"


def test_security_settings_resolve_like_every_field__env_beats_file() -> None:
    env = {
        "KVCOMPASS_SASL_PASSWORD": "from-env",
        "KVCOMPASS_SASL_USERNAME": "env-user",
        "KVCOMPASS_SECURITY_PROTOCOL": "SASL_SSL",
        "KVCOMPASS_SASL_MECHANISM": "SCRAM-SHA-512",
    }
    got = PipelineConfig.resolve({"sasl_username": "file-user", "n_shards": 3}, env, {})
    assert (got.sasl_username, got.sasl_password, got.n_shards) == ("env-user", "from-env", 3)
