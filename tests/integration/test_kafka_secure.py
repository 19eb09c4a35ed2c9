"""Kafka with SASL and TLS (issue 26 item 9): the local broker's ``--secure`` listener
(SASL_SSL, SCRAM-SHA-512, a CA made with openssl) carries the whole pipeline end to end, every
client configured only through ``PipelineConfig``'s security fields; a client without
credentials, or with a wrong password, is refused and writes nothing.

A broker of its own (its JVM starts in 20-60 s here), so the session broker stays PLAINTEXT.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kvcompass.layout import TableLayout
from tests.ci import missing
from tests.integration.test_pipeline_worker import DEP, LEVELS, WAIT_S, Feed, Worker, _converged
from tests.integration.test_pipeline_worker import _wait as wait_for
from wire.config import PipelineConfig
from wire.kafka_clients import aiokafka_kwargs, librdkafka_conf
from wire.kafka_local import BrokerError, LocalBroker
from wire.patch_follower import follow
from wire.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    state = tmp_path_factory.mktemp("secure-broker")
    broker = LocalBroker(_free_port(), controller_port=_free_port(), secure=True,
                         state_dir=state, die_with_parent=True)  # fmt: skip
    try:
        broker.up(timeout_s=180)
    except (BrokerError, OSError) as exc:
        missing(f"no secure local broker: {type(exc).__name__}: {exc}")
    try:
        yield broker
    finally:
        broker.down()


def _high(cfg: PipelineConfig, topic: str) -> int:
    c = Consumer(librdkafka_conf(cfg, {"group.id": "its-marks"}))
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
                   for p in range(cfg.kv_events_partitions))  # fmt: skip
    finally:
        c.close()


def test_pipeline_end_to_end__sasl_ssl_only(
    secure: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = replace(secure.client_config(), n_shards=3, topic_prefix="its.")
    assert cfg.security_protocol == "SASL_SSL" and cfg.ssl_ca_location
    ensure_topics(AdminClient(librdkafka_conf(cfg)), cfg)
    env_file = secure.state_dir / "tls" / "client.env"
    for line in env_file.read_text().splitlines():  # what `kafka up --secure` tells a user
        key, _, value = line.removeprefix("export ").partition("=")
        monkeypatch.setenv(key, value)
    worker = Worker(cfg, tmp_path / "worker.log")
    feed = Feed(cfg, seed=3)
    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    (tmp_path / "views").mkdir()
    sync = follow(cfg, layout, LEVELS.matrix, tmp_path / "views")
    try:
        worker.start()  # Faust (aiokafka) + confluent-kafka producers and recovery consumers
        feed.send(300)
        wait_for(_converged(sync, feed.truth()), WAIT_S, "the view to equal the truth")
    finally:
        worker.stop()
        sync.close()

    before = _high(cfg, cfg.topics.kv_events)
    plain = PipelineConfig(bootstrap_servers=cfg.bootstrap_servers)
    with pytest.raises(KafkaException):
        AdminClient(librdkafka_conf(plain)).list_topics(timeout=5)
    wrong = replace(cfg, sasl_password="not-the-password")
    with pytest.raises(KafkaException) as err:
        AdminClient(librdkafka_conf(wrong)).list_topics(timeout=10)
    print(f"wrong password: {err.value}")
    for bad in (plain, wrong):
        errors: list[object] = []
        p = Producer(librdkafka_conf(bad, {"message.timeout.ms": 5000}))
        p.produce(cfg.topics.kv_events, b"intruder", b"\x00\x00\x00\x01",
                  on_delivery=lambda err, _msg, seen=errors: seen.append(err))  # fmt: skip
        p.flush(15)
        assert len(errors) == 1 and errors[0] is not None, errors  # never delivered
        print(f"{bad.security_protocol} producer: {errors[0]}")
    with pytest.raises(Exception) as refused:  # aiokafka, Faust's client, without credentials
        asyncio.run(_aiokafka_start(plain))
    print(f"aiokafka without credentials: {type(refused.value).__name__}: {refused.value}")
    asyncio.run(_aiokafka_start(cfg))  # and with them, it connects
    assert _high(cfg, cfg.topics.kv_events) == before


async def _aiokafka_start(cfg: PipelineConfig) -> None:
    p = AIOKafkaProducer(**aiokafka_kwargs(cfg), request_timeout_ms=5000)
    try:
        await asyncio.wait_for(p.start(), 15)
    finally:
        await asyncio.wait_for(p.stop(), 15)
