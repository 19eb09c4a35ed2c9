"""Client settings from a ``PipelineConfig``: the one place that turns the broker address and the
security fields into what each Kafka library takes.

- ``librdkafka_conf(cfg, extra)``: confluent-kafka's ``Producer`` / ``Consumer`` /
  ``AdminClient`` dict (``bootstrap.servers``, ``security.protocol``, ``sasl.*``, ``ssl.*``),
  ``extra`` merged on top (``group.id``, ``linger.ms``...).
- ``aiokafka_kwargs(cfg)``: keyword arguments of aiokafka's clients (the sidecar's migrations
  consumer, the e2e probes' admin) and, through ``pipeline.agents``, of Faust's credentials
  (``faust.SASLCredentials`` / ``faust.SSLCredentials`` carry exactly these).

What works (tested in ``tests/integration/test_kafka_secure.py`` against ``kvcompass kafka up
--secure``): PLAINTEXT, SSL (server TLS, optional client certificate), SASL_SSL and
SASL_PLAINTEXT with PLAIN or SCRAM-SHA-256/512, in all three libraries. Not wired: MSK IAM
(OAUTHBEARER with AWS's token signer; librdkafka takes it through an ``oauth_cb`` and aiokafka
through a ``sasl_oauth_token_provider``, but neither is built here: ``PipelineConfig`` refuses it).

Must not: open connections (callers build the clients), or read the environment
(``PipelineConfig.from_env`` does).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Mapping
from typing import Any

from wire.config import PipelineConfig

RDKAFKA_LOGGER = "librdkafka"
"""librdkafka's own log lines go through this Python logger (``logger`` setting), so that they
are rate-limited with the rest (``wire.logs``) instead of written straight to stderr (an edge
wrote ~5,000 ``Connect ... failed`` lines in a minute without its broker)."""


def as_config(broker: str | PipelineConfig) -> PipelineConfig:
    """A tool's broker argument: a whole config, or a bare address (PLAINTEXT)."""
    return (
        broker if isinstance(broker, PipelineConfig) else PipelineConfig(bootstrap_servers=broker)
    )


def librdkafka_conf(
    broker: str | PipelineConfig, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """confluent-kafka settings reaching ``broker`` as its config says, plus ``extra``."""
    cfg = as_config(broker)
    conf: dict[str, Any] = {
        "bootstrap.servers": cfg.bootstrap_servers,
        "logger": logging.getLogger(RDKAFKA_LOGGER),
    }
    if cfg.security_protocol != "PLAINTEXT":
        conf["security.protocol"] = cfg.security_protocol.lower()
    if cfg.security_protocol.startswith("SASL_"):
        conf.update({"sasl.mechanism": cfg.sasl_mechanism, "sasl.username": cfg.sasl_username,
                     "sasl.password": cfg.sasl_password})  # fmt: skip
    if cfg.security_protocol in ("SSL", "SASL_SSL"):
        if cfg.ssl_ca_location:
            conf["ssl.ca.location"] = cfg.ssl_ca_location
        if cfg.ssl_certificate_location:
            conf["ssl.certificate.location"] = cfg.ssl_certificate_location
            conf["ssl.key.location"] = cfg.ssl_key_location
        if cfg.ssl_key_password:
            conf["ssl.key.password"] = cfg.ssl_key_password
        conf["ssl.endpoint.identification.algorithm"] = (
            "https" if cfg.ssl_check_hostname else "none"
        )
    conf.update(extra or {})
    return conf


def ssl_context(cfg: PipelineConfig) -> ssl.SSLContext | None:
    """The TLS context of the asyncio clients (None without TLS): ``cfg``'s CA (else the
    system's), its client certificate if any, host names checked unless turned off."""
    if cfg.security_protocol not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_location or None)
    if cfg.ssl_certificate_location:
        ctx.load_cert_chain(
            cfg.ssl_certificate_location, cfg.ssl_key_location, cfg.ssl_key_password or None
        )
    if not cfg.ssl_check_hostname:
        ctx.check_hostname = False
    return ctx


def aiokafka_kwargs(cfg: PipelineConfig) -> dict[str, Any]:
    """aiokafka client keyword arguments (``bootstrap_servers`` included)."""
    kw: dict[str, Any] = {
        "bootstrap_servers": cfg.bootstrap_servers,
        "security_protocol": cfg.security_protocol,
    }
    ctx = ssl_context(cfg)
    if ctx is not None:
        kw["ssl_context"] = ctx
    if cfg.security_protocol.startswith("SASL_"):
        kw.update({"sasl_mechanism": cfg.sasl_mechanism,
                   "sasl_plain_username": cfg.sasl_username,
                   "sasl_plain_password": cfg.sasl_password})  # fmt: skip
    return kw
