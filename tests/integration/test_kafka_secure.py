"""Kafka with SASL and TLS (issue 26 item 9, issue 35 item 4): the local broker's ``--secure``
listener (SASL_SSL, SCRAM-SHA-512, a CA made with openssl) carries the whole pipeline end to end,
every process with its own role's credentials (``wire.acls``), configured only through
``PipelineConfig``'s security fields; a client without credentials, or with a wrong password, is
refused and writes nothing; a role writes only its own topics (a sidecar cannot write
``index-patches``), alters no broker config, and an anonymous admin client cannot reach the
KRaft controller (Kafka's own Java ``Admin`` with ``bootstrap.controllers``, as an attacker
would).

A broker of its own (its JVM starts in 20-60 s here), so the session broker stays PLAINTEXT.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, not in __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from kvcompass.layout import TableLayout
from tests.ci import missing
from tests.integration.test_pipeline_worker import DEP, LEVELS, WAIT_S, Feed, Worker, _converged
from tests.integration.test_pipeline_worker import _wait as wait_for
from wire.acls import ensure_acls, writers
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
        admin = broker.client_config("admin")
        ensure_acls(AdminClient(librdkafka_conf(admin)), _its(admin))  # this test's deployment
        yield broker
    finally:
        broker.down()


def _its(cfg: PipelineConfig) -> PipelineConfig:
    return replace(cfg, n_shards=3, topic_prefix="its.")


def _high(cfg: PipelineConfig, topic: str, partitions: int | None = None) -> int:
    c = Consumer(librdkafka_conf(cfg, {"group.id": "its-marks"}))
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1]
                   for p in range(partitions or cfg.kv_events_partitions))  # fmt: skip
    finally:
        c.close()


def test_pipeline_end_to_end__sasl_ssl_only(
    secure: LocalBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = _its(secure.client_config("admin"))
    assert admin.security_protocol == "SASL_SSL" and admin.ssl_ca_location
    ensure_topics(AdminClient(librdkafka_conf(admin)), admin)  # topics: the admin's job
    env_file = secure.state_dir / "tls" / "maintenance.env"
    for line in env_file.read_text().splitlines():  # what `kafka up --secure` tells a user
        key, _, value = line.removeprefix("export ").partition("=")
        monkeypatch.setenv(key, value)
    cfg = _its(secure.client_config("maintenance"))
    assert cfg.sasl_username == "kvcompass-maintenance"
    worker = Worker(cfg, tmp_path / "worker.log")  # its credentials: the env file above
    feed = Feed(_its(secure.client_config("sidecar")), seed=3)  # kv-events, as a sidecar
    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    (tmp_path / "views").mkdir()
    edge = _its(secure.client_config("edge"))
    sync = follow(edge, layout, LEVELS.matrix, tmp_path / "views")  # index-patches, as an edge
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


def _produce(cfg: PipelineConfig, topic: str) -> object:
    """The delivery error of one record (None: written)."""
    errors: list[object] = []
    p = Producer(librdkafka_conf(cfg, {"message.timeout.ms": 5000}))
    p.produce(topic, b"\x00\x00\x00\x00\x01", b"\x00\x00\x00\x01",
              on_delivery=lambda err, _msg, seen=errors: seen.append(err))  # fmt: skip
    p.flush(15)
    assert len(errors) == 1, errors
    return errors[0]


def test_each_role_writes_only_its_topics__a_sidecar_cannot_write_index_patches(
    secure: LocalBroker,
) -> None:
    admin = _its(secure.client_config("admin"))
    ensure_topics(AdminClient(librdkafka_conf(admin)), admin)
    t = admin.topics
    sidecar = _its(secure.client_config("sidecar"))
    patches = t.index_patches
    before = _high(admin, patches, admin.n_shards)
    refused = _produce(sidecar, patches)
    print(f"sidecar -> {patches}: {refused}")
    assert refused is not None and "TOPIC_AUTHORIZATION_FAILED" in str(refused)
    assert _high(admin, patches, admin.n_shards) == before  # nothing written
    # every role against every topic: written exactly where wire.acls says it is the writer
    for role in ("sidecar", "maintenance", "edge"):
        cfg = _its(secure.client_config(role))
        for topic in t.all():
            err = _produce(cfg, topic)
            allowed = role in writers(admin, topic)
            assert (err is None) == allowed, (role, topic, err)
            assert allowed or "TOPIC_AUTHORIZATION_FAILED" in str(err), (role, topic, err)


def test_no_unauthenticated_admin_path__controller_and_roles_alter_no_config(
    secure: LocalBroker,
) -> None:
    probe = Path(__file__).parent / "java" / "ControllerProbe.java"
    controller = f"127.0.0.1:{secure.controller_port}"
    tls = secure.state_dir / "tls"
    trust = ["security.protocol=SSL", "ssl.truststore.type=PEM",
             f"ssl.truststore.location={tls / 'ca.pem'}"]  # fmt: skip

    def attempt(setting: str, *client: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [secure.java, "-cp", f"{secure.lib_dir}/*", str(probe), controller, setting, *client],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    for name, client in (("PLAINTEXT", []), ("TLS, no client certificate", trust)):
        done = attempt("log.retention.ms=1000", *client)
        cause = [ln for ln in done.stderr.splitlines() if ln.startswith("Caused by")][-1:]
        print(f"anonymous admin on the controller ({name}): exit {done.returncode}: {cause}")
        assert done.returncode != 0 and "ACCEPTED" not in done.stdout, done.stdout
    # the probe itself works: with the broker's own certificate (a super user) it is accepted
    password = (tls / "keystore.password").read_text().strip()
    own = [*trust, "ssl.keystore.type=PKCS12", f"ssl.keystore.location={tls / 'broker.p12'}",
           f"ssl.keystore.password={password}"]  # fmt: skip
    done = attempt("log.cleaner.backoff.ms=5000", *own)  # harmless: the file's own value
    assert done.returncode == 0 and "ACCEPTED" in done.stdout, done.stderr[-2000:]
    # the roles' credentials on the client port: no broker config changes either
    entry = ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    for role in ("sidecar", "maintenance", "edge"):
        a = AdminClient(librdkafka_conf(secure.client_config(role)))
        (future,) = a.incremental_alter_configs(
            [ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])]
        ).values()
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            future.result(timeout=20)
    admin = AdminClient(librdkafka_conf(secure.client_config("admin")))
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, "1")]).values()
    retention = future.result(timeout=20)["log.retention.ms"]
    print(f"log.retention.ms after the attempts: {retention.value} ({retention.source})")
    assert retention.value != "1000"
    # and the positive control: the admin may (a harmless setting, to its file value)
    harmless = ConfigEntry("log.cleaner.backoff.ms", "5000",
                           incremental_operation=AlterConfigOpType.SET)  # fmt: skip
    (future,) = admin.incremental_alter_configs(
        [ConfigResource(ResourceType.BROKER, "1", incremental_configs=[harmless])]
    ).values()
    future.result(timeout=20)
