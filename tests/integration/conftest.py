"""A real Kafka broker for the integration tests, one per test session.

Which broker is an explicit choice (``tests/integration/brokers.py``): ``KAFKA_BOOTSTRAP_SERVERS``
names a running one; otherwise ``KVCOMPASS_TEST_BROKER`` = ``local`` (the default:
``wire.kafka_local.LocalBroker`` on free ports with a throw-away state directory; the jar
cache under ``${KVCOMPASS_CACHE:-~/.cache/kvcompass}`` is shared, the first run fetches the jars
with Maven), ``testcontainers`` (testcontainers' ``KafkaContainer``; needs a Docker engine) or
``auto`` (the container where Docker answers, else local). The fixture logs which one it uses.
If the chosen broker cannot start the tests are skipped, except under ``CI=true`` or an explicit
``testcontainers`` choice, where the run FAILS, so that a green CI can never hide a missing
broker. Each test gets its own topic prefix.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient

from tests.ci import missing
from tests.integration.brokers import KAFKA_IMAGE, broker_choice, docker_answers, kafka_container
from wire.config import PipelineConfig
from wire.kafka_local import BrokerError, LocalBroker

log = logging.getLogger(__name__)


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


def _announce(config: pytest.Config, broker: KafkaBroker) -> None:
    line = f"integration tests: Kafka broker {broker.source} at {broker.bootstrap}"
    log.warning(line)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past the capture, on the terminal
            reporter.write_line(line)


@pytest.fixture(scope="session")
def kafka_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaBroker]:
    if bootstrap := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        broker = KafkaBroker(bootstrap, "KAFKA_BOOTSTRAP_SERVERS")
        _announce(request.config, broker)
        yield broker
        return
    choice = broker_choice()
    if choice == "auto":
        choice = "testcontainers" if docker_answers() else "local"
        answer = "answers" if choice == "testcontainers" else "does not answer"
        log.warning("KVCOMPASS_TEST_BROKER=auto: Docker %s, so %s", answer, choice)
    if choice == "testcontainers":
        try:
            container = kafka_container()
            container.start()
        except Exception as exc:  # an explicit choice that cannot be honoured fails the run
            pytest.fail(f"KVCOMPASS_TEST_BROKER=testcontainers: {type(exc).__name__}: {exc}",
                        pytrace=False)  # fmt: skip
        try:
            source = f"testcontainers ({KAFKA_IMAGE})"
            broker = KafkaBroker(container.get_bootstrap_server(), source)
            _announce(request.config, broker)
            yield broker
        finally:
            container.stop()
        return
    local = LocalBroker(
        _free_port(),
        controller_port=_free_port(),
        state_dir=tmp_path_factory.mktemp("kafka-broker"),
        die_with_parent=True,
    )
    try:
        bootstrap = local.up(timeout_s=120)
    except (BrokerError, OSError) as exc:
        message = "no Kafka broker for the integration tests: local broker (infra/local): "
        message += f"{type(exc).__name__}: {exc}"
        missing(message)
    try:
        broker = KafkaBroker(bootstrap, "local (infra/local KRaft)", local)
        _announce(request.config, broker)
        yield broker
    finally:
        local.down()


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
