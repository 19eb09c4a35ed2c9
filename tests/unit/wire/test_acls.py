"""``wire.acls``: one principal per role, each writing only the topics architecture §7 names it
the producer of; the broker properties of ``--secure`` leave no unauthenticated listener."""

from __future__ import annotations

from pathlib import Path

from wire.acls import ROLES, bindings, grants, user, writers
from wire.config import PipelineConfig
from wire.kafka_secure import BROKER_SUBJECT, SecureFiles

CFG = PipelineConfig(topic_prefix="p.", mirror_sources=("eu",))


def test_each_topic_has_the_writers_of_architecture_7() -> None:
    t = CFG.topics
    assert {topic: writers(CFG, topic) for topic in t.all()} == {
        t.kv_events: ("sidecar",),
        t.index_ops: ("maintenance",),
        t.index_patches: ("maintenance",),
        t.index_snapshots: ("maintenance",),
        t.queue_vectors: ("edge", "sidecar"),
        t.migrations: ("edge",),
        t.routing_decisions: ("edge",),
        t.dead_letters: ("edge", "maintenance", "sidecar"),
    }
    assert "sidecar" not in writers(CFG, t.index_patches)  # issue 35 item 4
    assert writers(CFG, "p.kvcompass-pipeline-__assignor-__leader") == ("maintenance",)
    assert writers(CFG, "eu.p.index-patches") == ()  # copies: MirrorMaker 2's, not a role's


def test_reads_cover_the_mirrored_copies__and_admin_is_the_only_cluster_grant() -> None:
    g = grants(CFG)
    reads = {(x.role, x.name) for x in g if x.operation == "READ" and x.resource == "topic"}
    assert {("edge", "eu.p.queue-vectors"), ("edge", "eu.p.index-patches"),
            ("sidecar", "eu.p.migrations")} <= reads  # fmt: skip
    assert ("sidecar", "p.index-patches") not in reads
    cluster = [x for x in g if x.resource == "cluster"]
    assert [(x.role, x.operation) for x in cluster] == [("admin", "ALL")]
    assert {x.role for x in g} == set(ROLES)
    assert len(bindings(g)) == len(g) and all(b.principal.startswith("User:kvcompass-")
                                              for b in bindings(g))  # fmt: skip


def test_secure_broker_properties__no_plaintext_listener_and_an_authorizer(
    tmp_path: Path,
) -> None:
    files = SecureFiles(tmp_path, tmp_path / "ca.pem", tmp_path / "b.p12", "k", "b",
                        tuple((r, f"pw-{r}") for r in ROLES))  # fmt: skip
    props = dict(
        line.split("=", 1)
        for line in files.server_properties(9092, 9093).splitlines()
        if "=" in line and not line.startswith("#")
    )
    protocols = dict(x.split(":") for x in props["listener.security.protocol.map"].split(","))
    assert protocols == {"CONTROLLER": "SSL", "SASL_SSL": "SASL_SSL"}
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["authorizer.class.name"].endswith("StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert set(props["super.users"].split(";")) == {
        "User:broker",
        f"User:{BROKER_SUBJECT}",
        f"User:{user('admin')}",
    }
    users = files.scram_args()[1::2]
    assert [u.split(",")[0] for u in users] == [
        "SCRAM-SHA-512=[name=broker",
        *(f"SCRAM-SHA-512=[name=kvcompass-{r}" for r in ROLES),
    ]
