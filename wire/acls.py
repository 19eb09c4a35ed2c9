"""One Kafka principal per role, and what each may do (architecture §7's producer → consumer).

``grants(cfg)`` is the table (pure): for the topics of one ``PipelineConfig`` (its prefix, its
MirrorMaker 2 copies), which role may READ or WRITE which topic, which consumer groups it may
use, and what every role needs to start (``DESCRIBE`` and ``DESCRIBE_CONFIGS`` of the
deployment's topics: ``wire.topics.ensure_topics`` verifies them at every start). A role writes
only the topics §7 names it the producer of:

- sidecar writes ``kv-events``, ``queue-vectors`` (load reports), ``dead-letters``; reads
  ``migrations`` (and its MirrorMaker 2 copies);
- maintenance writes ``index-ops``, ``index-patches``, ``index-snapshots``, ``dead-letters``;
  reads ``kv-events``, ``index-ops``, ``index-patches``, ``index-snapshots``;
- edge writes ``queue-vectors``, ``migrations``, ``routing-decisions``, ``dead-letters``; reads
  ``index-patches`` and ``queue-vectors`` (and their copies);
- admin may do anything (the cluster, every topic and group): creates topics and these ACLs.

Maintenance also owns its Faust app's internal topics (``<app id>-...``: created, read and
written) and group. ``ensure_acls`` creates the bindings (idempotent; needs the admin role);
``infra/terraform/modules/topology`` declares the same table for MSK
(``tests/integration/test_terraform.py`` compares the two).

Must not: create users or topics (``wire.kafka_secure`` / Terraform, ``wire.topics``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kvcompass.errors import KVCompassError
from wire.config import PipelineConfig

ROLES = ("sidecar", "maintenance", "edge", "admin")
USER_PREFIX = "kvcompass-"
"""A role's SCRAM user (and Kafka principal ``User:<name>``) is ``kvcompass-<role>``."""
DEFAULT_APP_ID = "kvcompass-pipeline"
"""The pipeline worker's Faust app id after the topic prefix (``cli/pipeline.py``)."""


class AclError(KVCompassError):
    """The broker refused to create an ACL binding (not the admin role? no authorizer?)."""


@dataclass(frozen=True, slots=True, order=True)
class Grant:
    """One ALLOW binding: ``role`` may ``operation`` on ``resource`` ``name``."""

    role: str
    resource: str
    """"topic", "group" or "cluster"."""
    name: str
    pattern: str
    """"literal" or "prefixed" (every name starting with ``name``)."""
    operation: str
    """READ, WRITE, DESCRIBE, DESCRIBE_CONFIGS, CREATE or ALL."""


def user(role: str) -> str:
    return f"{USER_PREFIX}{role}"


def grants(cfg: PipelineConfig, app_id: str | None = None) -> tuple[Grant, ...]:
    """Every binding of ``cfg``'s deployment, sorted; ``app_id``: the pipeline's Faust app id
    (default ``<prefix>kvcompass-pipeline``)."""
    t = cfg.topics
    app = app_id or f"{cfg.topic_prefix}{DEFAULT_APP_ID}"
    out: set[Grant] = set()

    def topic(role: str, op: str, *names: str) -> None:
        out.update(Grant(role, "topic", n, "literal", op) for n in names)

    def group(role: str, name: str, pattern: str = "prefixed") -> None:
        out.add(Grant(role, "group", name, pattern, "READ"))

    for role in ("sidecar", "maintenance", "edge"):  # ensure_topics at every start
        topic(role, "DESCRIBE", *t.all())
        topic(role, "DESCRIBE_CONFIGS", *t.all())
        topic(role, "WRITE", t.dead_letters)
    topic("sidecar", "WRITE", t.kv_events, t.queue_vectors)
    topic("sidecar", "READ", *cfg.mirrored(t.migrations))
    topic("sidecar", "DESCRIBE", *cfg.mirrored(t.migrations))
    group("sidecar", f"kvcompass-migrate-{cfg.topic_prefix}")
    topic("maintenance", "WRITE", t.index_ops, t.index_patches, t.index_snapshots)
    topic("maintenance", "READ", t.kv_events, t.index_ops, t.index_patches, t.index_snapshots)
    out.add(Grant("maintenance", "topic", f"{app}-", "prefixed", "ALL"))  # Faust's own topics
    group("maintenance", app)
    group("maintenance", "kvcompass-recovery", "literal")
    group("maintenance", "kvcompass-heal", "literal")
    patches = (*cfg.mirrored(t.index_patches), cfg.patches_topic)
    queues = cfg.mirrored(t.queue_vectors)
    topic("edge", "WRITE", t.queue_vectors, t.migrations, t.routing_decisions)
    topic("edge", "READ", *patches, *queues)
    topic("edge", "DESCRIBE", *patches, *queues)
    for what in ("edge-", "watch-", "view-"):  # wire.patch_follower.consumer_conf
        group("edge", f"kvcompass-{what}")
    out.add(Grant("admin", "cluster", "kafka-cluster", "literal", "ALL"))
    out.add(Grant("admin", "topic", "*", "literal", "ALL"))
    out.add(Grant("admin", "group", "*", "literal", "ALL"))
    return tuple(sorted(out))


def writers(cfg: PipelineConfig, topic_name: str) -> tuple[str, ...]:
    """The roles that may write ``topic_name`` (admin, which may do anything, left out)."""
    return tuple(sorted({g.role for g in grants(cfg) if g.role != "admin"
                         and g.resource == "topic" and g.operation in ("WRITE", "ALL")
                         and _matches(g, topic_name)}))  # fmt: skip


def _matches(g: Grant, name: str) -> bool:
    return name == g.name if g.pattern == "literal" else name.startswith(g.name)


_RESOURCE = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP,
             "cluster": ResourceType.BROKER}  # fmt: skip
_PATTERN = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED}


def bindings(items: Iterable[Grant]) -> list[AclBinding]:
    """``items`` as confluent-kafka ACL bindings (principal ``User:kvcompass-<role>``)."""
    return [
        AclBinding(
            _RESOURCE[g.resource],
            g.name,
            _PATTERN[g.pattern],
            f"User:{user(g.role)}",
            "*",
            AclOperation[g.operation],
            AclPermissionType.ALLOW,
        )
        for g in items
    ]


def ensure_acls(admin: AdminClient, cfg: PipelineConfig, timeout_s: float = 30.0) -> int:
    """Create every binding of ``grants(cfg)`` (existing ones are left as they are); returns
    how many were asked for. ``AclError`` names the first the broker refused."""
    wanted = bindings(grants(cfg))
    for binding, future in admin.create_acls(wanted, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise AclError(f"create_acls({binding}) refused: {exc}") from exc
    return len(wanted)
