"""Where the integration tests' Kafka broker comes from: the choice, and the container's setup.

Owns reading ``KVCOMPASS_TEST_BROKER`` and building testcontainers' ``KafkaContainer``; the
fixture that starts and stops the broker is ``tests/integration/conftest.py``. Choices:

* ``local`` (default; this project's machines and CI have no Docker engine):
  ``wire.kafka_local.LocalBroker``, the KRaft broker of ``infra/local``, on free ports;
* ``testcontainers``: ``KafkaContainer`` in KRaft mode; fails if no Docker engine answers;
* ``auto``: ``testcontainers`` where a Docker engine answers, ``local`` otherwise.

``KAFKA_BOOTSTRAP_SERVERS``, when set, names a running broker and wins over all three.

The container mirrors ``infra/local/server.properties.template`` where the tests can tell the
difference (no topic auto-creation, one partition by default, the log cleaner's pace, no group
rebalance delay): a test that passes on one broker must pass on the other.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from testcontainers.community.kafka import KafkaContainer

ENV = "KVCOMPASS_TEST_BROKER"
CHOICES = ("local", "testcontainers", "auto")
DEFAULT = "local"
KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.0"
"""testcontainers' own default image (Kafka 3.6), the one its Kafka module is tested with."""

MIRRORED_SETTINGS: dict[str, str] = {
    "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    "KAFKA_NUM_PARTITIONS": "1",
    "KAFKA_DEFAULT_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
    "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
    "KAFKA_LOG_CLEANER_DEDUPE_BUFFER_SIZE": "33554432",
    "KAFKA_LOG_CLEANER_BACKOFF_MS": "5000",
}
"""Broker settings of ``infra/local/server.properties.template``, as cp-kafka environment."""


def broker_choice(environ: os._Environ[str] | dict[str, str] = os.environ) -> str:
    """The configured choice; ``ValueError`` names the allowed values on anything else."""
    choice = environ.get(ENV, DEFAULT).strip().lower() or DEFAULT
    if choice not in CHOICES:
        raise ValueError(f"{ENV}: expected one of {', '.join(CHOICES)}; got {choice!r}")
    return choice


def kafka_container(docker_client_kw: dict[str, Any] | None = None) -> KafkaContainer:
    """The configured, not started, container (``docker_client_kw`` goes to docker-py)."""
    container = KafkaContainer(KAFKA_IMAGE, docker_client_kw=docker_client_kw).with_kraft()
    for key, value in MIRRORED_SETTINGS.items():
        container.with_env(key, value)
    return container


def docker_answers() -> bool:
    """Whether a Docker engine accepts a connection (``DOCKER_HOST`` or the default socket)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("tcp://"):
        addr, _, port = host.removeprefix("tcp://").partition(":")
        try:
            socket.create_connection((addr, int(port or 2375)), timeout=0.5).close()
            return True
        except (OSError, ValueError):
            return False
    path = host.removeprefix("unix://") if host.startswith("unix://") else "/var/run/docker.sock"
    if not Path(path).exists():
        return False
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(0.5)
        try:
            s.connect(path)
            return True
        except OSError:
            return False
