"""The topics of architecture §7: their specs, and creating or verifying them on a broker.

``topic_specs(config)`` says what every topic must look like; ``plan_topics`` compares that with
what a broker has and returns a decision (create these, this drift, refuse these) without I/O;
``ensure_topics`` does the admin calls around it.

Refused (``ConfigError``), because the pipeline would be silently wrong: ``index-ops`` or
``index-patches`` with a partition count other than N (partition = shard, so every key would be
owned by the wrong maintenance unit), and ``index-patches`` not compacted (the view could not be
rebuilt from the topic). Anything else that differs (a retention, a larger ``kv-events``) is
reported as drift and left alone: changing a live topic is an operator's decision.

Must not: produce or consume records, or choose partition counts at run time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # public, but not in __all__
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from kvcompass.errors import ConfigError, KVCompassError
from wire.config import MIN_CHECKPOINT_PERIOD_MS, PipelineConfig, implied_checkpointing


class TopicAdminError(KVCompassError):
    """The broker did not create, list or describe topics in time."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What one topic must look like."""

    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]
    fixed_partitions: bool = False
    """The partition count is part of the contract (partition = shard): refuse any other."""
    required: frozenset[str] = field(default_factory=frozenset)
    """Config keys whose mismatch is refused rather than reported."""


@dataclass(frozen=True, slots=True)
class ExistingTopic:
    """What a broker has for one topic (only the config keys a spec names matter)."""

    name: str
    partitions: int
    configs: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Drift:
    """One difference between a spec and a broker: ``item`` is ``partitions`` or a config key."""

    topic: str
    item: str
    expected: str
    actual: str

    def __str__(self) -> str:
        return f"{self.topic}: {self.item} expected {self.expected}, got {self.actual}"


@dataclass(frozen=True, slots=True)
class TopicPlan:
    """Decision of ``plan_topics``."""

    create: tuple[TopicSpec, ...]
    drift: tuple[Drift, ...]
    refused: tuple[Drift, ...]


@dataclass(frozen=True, slots=True)
class TopicReport:
    """Outcome of ``ensure_topics``."""

    created: tuple[str, ...]
    existing: tuple[str, ...]
    drift: tuple[Drift, ...]


def topic_specs(config: PipelineConfig) -> tuple[TopicSpec, ...]:
    """Every topic of architecture §7 for this configuration, in table order."""
    t, rf = config.topics, config.replication_factor

    def spec(name: str, partitions: int, configs: dict[str, str], **kw: bool) -> TopicSpec:
        required = frozenset({"cleanup.policy"}) if kw.pop("compacted", False) else frozenset()
        return TopicSpec(name, partitions, rf, configs, required=required, **kw)

    def delete_after(ms: int) -> dict[str, str]:
        return {"cleanup.policy": "delete", "retention.ms": str(ms)}

    return (
        spec(t.kv_events, config.kv_events_partitions, delete_after(config.kv_events_retention_ms)),
        spec(
            t.index_ops,
            config.n_shards,
            {
                **delete_after(config.index_ops_retention_ms),
                "retention.bytes": str(config.index_ops_retention_bytes),
                "segment.ms": str(config.index_ops_segment_ms),
            },
            fixed_partitions=True,
        ),
        spec(
            t.index_patches,
            config.n_shards,
            {
                "cleanup.policy": "compact",
                "segment.ms": str(config.index_patches_segment_ms),
                "min.cleanable.dirty.ratio": "0.2",
                # Edges that fall behind must still see a tombstone of a retired epoch.
                "delete.retention.ms": str(24 * 3_600_000),
            },
            fixed_partitions=True,
            compacted=True,
        ),
        spec(
            t.queue_vectors,
            config.queue_vectors_partitions,
            {
                **delete_after(config.queue_vectors_retention_ms),
                "compression.type": "uncompressed",
                # Retention only deletes closed segments; roll as often as data expires.
                "segment.ms": str(config.queue_vectors_retention_ms),
            },
        ),
        spec(
            t.migrations, config.migrations_partitions, delete_after(config.migrations_retention_ms)
        ),
        spec(
            t.routing_decisions,
            config.routing_decisions_partitions,
            delete_after(config.routing_decisions_retention_ms),
        ),
        spec(t.dead_letters, 1, delete_after(config.dead_letters_retention_ms)),
        # Checkpoints (pipeline.checkpoint): partition = shard; compaction keeps the latest
        # manifest and the chunks not yet tombstoned (those of the latest two checkpoints).
        spec(
            t.index_snapshots,
            config.n_shards,
            {
                "cleanup.policy": "compact",
                "segment.ms": str(config.index_patches_segment_ms),
                "min.cleanable.dirty.ratio": "0.2",
            },
            fixed_partitions=True,
            compacted=True,
        ),
    )


def adopt_retention(config: PipelineConfig, drift: Iterable[Drift]) -> tuple[PipelineConfig, str]:
    """The checkpoint rule against the broker's actual ``index-ops`` retention (a decision, no
    I/O). Recovery replays the tail after the latest checkpoint, so the broker must keep more
    than ``checkpoint_period_ms + checkpoint_margin_ms``. If it keeps less (someone changed the
    topic), the unit adopts the broker's value and checkpoints often enough
    (``wire.config.implied_checkpointing``: ``(retention - margin) / 2``, or with the margin cut
    to half the retention when that is under 1 s); returns the adjusted config and what was
    done ("" if nothing). If even a 1 s period cannot meet it, ``ConfigError`` names both values
    (one line)."""
    need = config.checkpoint_period_ms + config.checkpoint_margin_ms
    for d in drift:
        if d.topic != config.topics.index_ops or d.item != "retention.ms":
            continue
        try:
            broker_ms = int(d.actual)
        except ValueError:
            return config, ""
        if broker_ms < 0 or broker_ms > need:  # -1: kept forever
            return config, ""
        try:
            period, margin = implied_checkpointing(
                broker_ms, config.checkpoint_period_ms, config.checkpoint_margin_ms
            )
        except ConfigError:
            raise ConfigError(
                f"{d.topic}: retention.ms on the broker is {broker_ms}, expected > "
                f"checkpoint_period_ms + checkpoint_margin_ms = {need} (with at least "
                f"{MIN_CHECKPOINT_PERIOD_MS} ms of period); raise the topic's retention.ms"
            ) from None
        adopted = replace(config, index_ops_retention_ms=broker_ms, checkpoint_period_ms=period,
                          checkpoint_margin_ms=margin)  # fmt: skip
        cut = "" if margin == config.checkpoint_margin_ms else f" and a margin of {margin} ms"
        return adopted, (
            f"{d.topic}: retention.ms on the broker is {broker_ms}, below checkpoint_period_ms + "
            f"checkpoint_margin_ms = {need}: checkpointing every {period} ms instead of "
            f"{config.checkpoint_period_ms} ms{cut}"
        )
    return config, ""


def plan_topics(specs: Iterable[TopicSpec], existing: Mapping[str, ExistingTopic]) -> TopicPlan:
    """What to create, and how existing topics differ from their specs (no I/O)."""
    create: list[TopicSpec] = []
    drift: list[Drift] = []
    refused: list[Drift] = []
    for spec in specs:
        have = existing.get(spec.name)
        if have is None:
            create.append(spec)
            continue
        if have.partitions != spec.partitions:
            d = Drift(spec.name, "partitions", str(spec.partitions), str(have.partitions))
            (refused if spec.fixed_partitions else drift).append(d)
        for key, want in spec.configs.items():
            got = have.configs.get(key, "<unset>")
            if got != want:
                (refused if key in spec.required else drift).append(
                    Drift(spec.name, key, want, got)
                )
    return TopicPlan(tuple(create), tuple(drift), tuple(refused))


def ensure_topics(
    admin: AdminClient, config: PipelineConfig, timeout_s: float = 30.0
) -> TopicReport:
    """Create the missing topics of ``config`` and verify the others; refuse contract breaks.

    Safe to run concurrently from several processes: a topic another process created in between
    is verified like any existing one.
    """
    specs = topic_specs(config)
    deadline = time.monotonic() + timeout_s
    plan = plan_topics(specs, inspect_topics(admin, specs, timeout_s))
    _refuse(plan)
    created = _create(admin, plan.create, timeout_s)
    while True:
        final = plan_topics(specs, inspect_topics(admin, specs, timeout_s))
        _refuse(final)
        if not final.create:
            break
        if time.monotonic() > deadline:
            missing = [s.name for s in final.create]
            raise TopicAdminError(
                f"expected topics {missing} to exist {timeout_s} s after creation"
            )
        time.sleep(0.2)
    existing = tuple(s.name for s in specs if s.name not in created)
    return TopicReport(created=created, existing=existing, drift=final.drift)


def inspect_topics(
    admin: AdminClient, specs: Iterable[TopicSpec], timeout_s: float
) -> dict[str, ExistingTopic]:
    """Partition counts and configs of those spec'd topics that the broker has."""
    wanted = {s.name for s in specs}
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise TopicAdminError(f"list_topics failed: {exc}") from exc
    present = {
        name: len(md.partitions)
        for name, md in metadata.topics.items()
        if name in wanted and md.error is None
    }
    if not present:
        return {}
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in present]
    out: dict[str, ExistingTopic] = {}
    for resource, future in admin.describe_configs(resources).items():
        try:
            entries = future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise TopicAdminError(f"describe_configs({resource.name}) failed: {exc}") from exc
        configs = {key: str(entry.value) for key, entry in entries.items()}
        out[resource.name] = ExistingTopic(resource.name, present[resource.name], configs)
    return out


def _create(admin: AdminClient, specs: tuple[TopicSpec, ...], timeout_s: float) -> tuple[str, ...]:
    if not specs:
        return ()
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication_factor,
            config=dict(s.configs),
        )
        for s in specs
    ]
    created: list[str] = []
    for name, future in admin.create_topics(new, operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue  # created concurrently by someone else: verified like any existing topic
            raise TopicAdminError(f"create_topics({name}) failed: {exc}") from exc
        created.append(name)
    return tuple(created)


def _refuse(plan: TopicPlan) -> None:
    if plan.refused:
        lines = "; ".join(str(d) for d in plan.refused)
        raise ConfigError(
            f"existing topics break the pipeline's contract ({lines}); "
            "delete them or configure matching n_shards / a different topic_prefix"
        )
