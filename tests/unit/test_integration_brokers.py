"""The integration tests' broker choice and testcontainers' Kafka container, configured but never
started (no Docker engine is needed: the docker client is given an API version, so it does not
ask a server for one)."""

from __future__ import annotations

import pytest

from tests.integration.brokers import (
    DEFAULT,
    ENV,
    KAFKA_IMAGE,
    MIRRORED_SETTINGS,
    broker_choice,
    kafka_container,
)


def test_broker_choice__local_by_default_and_explicit_values_kept() -> None:
    assert broker_choice({}) == DEFAULT == "local"
    assert broker_choice({ENV: " Testcontainers "}) == "testcontainers"
    assert broker_choice({ENV: "auto"}) == "auto"


def test_broker_choice__unknown_value_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="local, testcontainers, auto"):
        broker_choice({ENV: "docker"})


def test_kafka_container__kraft_single_node_mirroring_the_local_broker() -> None:
    c = kafka_container({"version": "1.44"})
    c.configure()  # what start() does first: the KRaft environment, without a container
    assert c.image == KAFKA_IMAGE and c.kraft_enabled
    env = c.env
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    assert all(env[k] == v for k, v in MIRRORED_SETTINGS.items())
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert env["KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS"] == "0"
    assert str(c.port) in c.ports  # exposed on a random host port
