"""A real Kafka broker for the integration tests, one per test session.

Where the broker comes from, first that works:
1. ``KAFKA_BOOTSTRAP_SERVERS`` (a broker started by the developer or by CI);
2. testcontainers' Kafka module, only if the package is importable AND a Docker engine answers;
3. ``pipeline.kafka_local.LocalBroker`` on free ports with a throw-away state directory (the jar
   cache under ``${KVCOMPASS_CACHE:-~/.cache/kvcompass}`` is shared; the first run fetches the
   jars with Maven), stopped at session end.
If none works the tests are skipped, except under ``CI=true`` where the run FAILS, so that a green
CI can never hide a missing broker. Each test gets its own topic prefix.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from pipeline.config import PipelineConfig
from pipeline.kafka_local import BrokerError, LocalBroker


@dataclass(frozen=True)
class KafkaBroker:
    """The session's broker: its address, and the launcher when this session started it."""

    bootstrap: str
    source: str
    local: LocalBroker | None = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _docker_answers() -> bool:
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


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield KafkaBroker(bootstrap, "KAFKA_BOOTSTRAP_SERVERS")
        return
    failures: list[str] = []
    if importlib.util.find_spec("testcontainers") is not None and _docker_answers():
        try:
            from testcontainers.community.kafka import KafkaContainer

            container = KafkaContainer().with_kraft()
            container.start()
        except Exception as exc:  # any failure: fall through to the local broker
            failures.append(f"testcontainers: {type(exc).__name__}: {exc}")
        else:
            try:
                yield KafkaBroker(container.get_bootstrap_server(), "testcontainers")
            finally:
                container.stop()
            return
    broker = LocalBroker(
        _free_port(),
        controller_port=_free_port(),
        state_dir=tmp_path_factory.mktemp("kafka-broker"),
        die_with_parent=True,
    )
    try:
        bootstrap = broker.up(timeout_s=120)
    except (BrokerError, OSError) as exc:
        failures.append(f"local broker (infra/local): {type(exc).__name__}: {exc}")
    else:
        try:
            yield KafkaBroker(bootstrap, "local", broker)
        finally:
            broker.down()
        return
    message = "no Kafka broker for the integration tests:\n" + "\n".join(failures)
    if _in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker: KafkaBroker) -> str:
    return kafka_broker.bootstrap


@pytest.fixture
def topic_prefix() -> str:
    """Unique per test, so tests never see each other's topics on a shared broker."""
    return f"it-{uuid.uuid4().hex[:10]}."


@pytest.fixture
def pipeline_config(kafka_bootstrap: str, topic_prefix: str) -> PipelineConfig:
    return PipelineConfig(bootstrap_servers=kafka_bootstrap, topic_prefix=topic_prefix, n_shards=3)


@pytest.fixture(scope="session")
def kafka_admin(kafka_bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_bootstrap})
