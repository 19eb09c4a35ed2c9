"""``PipelineConfig``: the one frozen configuration of a pipeline process (architecture §7).

Owns the broker address, the shard count N, topic names (with an optional prefix, so tests and
several deployments can share a broker), partition counts, retentions and the optional schema
registry URL, and how clients reach the broker (``security_protocol``, SASL mechanism and
credentials, TLS files: turned into client settings by ``wire.kafka_clients``, the one place).
Built from a mapping (a parsed config file), the environment (``KVCOMPASS_SASL_PASSWORD``...), or
keyword arguments; validated in ``__post_init__``. Secrets are left out of ``repr``.

Every command builds it the same way (``PipelineConfig.resolve``), with one precedence for every
field: a command-line flag (``--bootstrap-servers``, ``--topic-prefix``, ``--n-shards``:
``cli/pipeline_flags.py``) over the environment (``KVCOMPASS_<FIELD>``, e.g.
``KVCOMPASS_N_SHARDS``; ``KAFKA_BOOTSTRAP_SERVERS`` too) over a config file's ``[pipeline]``
table over the default here (``n_shards`` = 4). The shard count must be the same for every
process of a deployment: it is the partition count of ``index-ops`` and ``index-patches``, fixed
when the first process creates them (``wire.topics`` refuses a process whose N differs).

Must not: do I/O (reading files or env is the caller's, passed in as mappings), or talk to Kafka.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from kvcompass.config_mapping import kwargs_from_mapping
from kvcompass.errors import ConfigError

_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]*$")
_ALIAS = re.compile(r"^[A-Za-z0-9_-]*$")
_MAX_TOPIC_LEN = 249
_MINUTE_MS = 60_000
_HOUR_MS = 60 * _MINUTE_MS
_DAY_MS = 24 * _HOUR_MS

ENV_PREFIX = "KVCOMPASS_"
"""Env var of field ``n_shards`` is ``KVCOMPASS_N_SHARDS``; ``bootstrap_servers`` also reads
``KAFKA_BOOTSTRAP_SERVERS`` (the name Kafka tooling and the test fixture use)."""


@dataclass(frozen=True, slots=True)
class TopicNames:
    """Full topic names of one deployment (prefix applied)."""

    kv_events: str
    index_ops: str
    index_patches: str
    queue_vectors: str
    migrations: str
    routing_decisions: str
    dead_letters: str
    index_snapshots: str

    def all(self) -> tuple[str, ...]:
        """Every topic name, in architecture §7 order."""
        return tuple(getattr(self, f.name) for f in fields(self))


@dataclass(frozen=True, slots=True)
class PipelineConfig:
    """Everything a pipeline process needs to find and shape its topics."""

    bootstrap_servers: str = "127.0.0.1:19092"
    n_shards: int = 4
    """N: shards of the key space = partitions of index-ops and index-patches."""
    topic_prefix: str = ""
    replication_factor: int = 1
    kv_events_partitions: int = 4
    queue_vectors_partitions: int = 1
    migrations_partitions: int = 2
    routing_decisions_partitions: int = 2
    kv_events_retention_ms: int = 7 * _DAY_MS
    index_ops_retention_ms: int = _HOUR_MS
    """Bounded (time): with checkpoints, recovery needs only the tail after the latest complete
    checkpoint. Rule (checked here): > ``checkpoint_period_ms + checkpoint_margin_ms``."""
    index_ops_retention_bytes: int = 1 << 30
    """Bounded (size, per partition). Rule (the operator's, it depends on the op rate; not
    checkable here): must hold ``(checkpoint_period_ms + checkpoint_margin_ms)`` of the peak
    op bytes/s of one shard, else size retention can delete a tail a recovery needs (which is
    then refused, loudly)."""
    index_ops_segment_ms: int = 10 * _MINUTE_MS
    """Retention deletes closed segments only; a roll well below the retention keeps storage
    near it."""
    checkpoint_period_ms: int = 60_000
    """A maintenance unit checkpoints its shard (``pipeline.checkpoint``) once this long has
    passed since its last checkpoint, at its next batch."""
    checkpoint_margin_ms: int = 10 * _MINUTE_MS
    """Slack of the retention rule: time for a checkpoint to be written and for a held or
    stopped unit to come back before the tail it needs expires. Left at their defaults, this
    and ``checkpoint_period_ms`` are implied by a shorter ``index_ops_retention_ms``
    (``implied_checkpointing``; what was implied is in ``checkpointing_note``)."""
    checkpoint_chunk_bytes: int = 512 * 1024
    """Payload bytes per ``ShardSnapshotChunk`` record: below the broker's default 1 MB
    ``max.message.bytes`` with room for the Avro and Kafka framing."""
    queue_vectors_retention_ms: int = 10 * _MINUTE_MS
    migrations_retention_ms: int = _HOUR_MS
    routing_decisions_retention_ms: int = 6 * _HOUR_MS
    dead_letters_retention_ms: int = 30 * _DAY_MS
    index_patches_segment_ms: int = 10 * _MINUTE_MS
    """Compaction only cleans closed segments; a short roll keeps the patch topic near its
    compacted size (one record per view piece)."""
    dead_letter_max_raw_bytes: int = 64 * 1024
    """Bytes of a bad record's value (and key) its dead letter keeps; its length and SHA-256 are
    kept whole (``wire.dead_letter``), so a dead letter always fits in a Kafka record."""
    schema_registry_url: str | None = None
    """None: schema ids from schemas/ids.json (wire.registry.InProcessRegistry)."""
    mirror_sources: tuple[str, ...] = ()
    """Multi-region: aliases of the other clusters whose copies of the cross-region topics
    MirrorMaker 2 writes into this one (``DefaultReplicationPolicy`` names a copy
    ``<alias>.<topic>``; infra/terraform uses the region name as alias). Consumers of
    ``queue-vectors`` and ``migrations`` read the local topic and every copy."""
    patches_source: str = ""
    """Multi-region: alias of the cluster the maintenance units write ``index-patches`` to; ""
    means this cluster. Edges elsewhere read the copy ``<alias>.index-patches`` (each shard has
    exactly one writer, so exactly one source topic)."""

    security_protocol: str = "PLAINTEXT"
    """How every client talks to the broker: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    sasl_mechanism: str = ""
    """With SASL_*: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (what confluent-kafka, aiokafka and
    Faust all speak). MSK IAM (``AWS_MSK_IAM`` / OAUTHBEARER with AWS's signer) is refused:
    not wired here (``wire/README.md``); MSK offers SCRAM on its 9096 listener."""
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)
    ssl_ca_location: str = ""
    """PEM file of the CA that signed the brokers' certificates; "": the system's CAs."""
    ssl_certificate_location: str = ""
    """PEM client certificate (mutual TLS), with ``ssl_key_location``; "": none."""
    ssl_key_location: str = ""
    ssl_key_password: str = field(default="", repr=False)
    ssl_check_hostname: bool = True
    """Check the broker certificate's host name (off only for a broker reached by an address
    its certificate does not name)."""
    checkpointing_note: str = field(default="", init=False, repr=False, compare=False)
    """What ``__post_init__`` implied from a short ``index_ops_retention_ms`` ("" if nothing);
    the pipeline worker prints it. Not a setting."""

    def __post_init__(self) -> None:
        _check_security(self)
        if not self.bootstrap_servers.strip():
            raise ConfigError("bootstrap_servers: expected host:port[,host:port...]; got ''")
        if not _TOPIC_CHARS.match(self.topic_prefix):
            raise ConfigError(
                f"topic_prefix: expected only [A-Za-z0-9._-]; got {self.topic_prefix!r}"
            )
        longest = len(self.topic_prefix) + len("routing-decisions")
        if longest > _MAX_TOPIC_LEN:
            raise ConfigError(
                f"topic_prefix: expected topic names <= {_MAX_TOPIC_LEN} chars; got {longest}"
            )
        for alias in (*self.mirror_sources, self.patches_source):
            if not isinstance(alias, str) or not _ALIAS.match(alias):
                raise ConfigError(
                    f"mirror_sources/patches_source: expected MM2 cluster aliases of "
                    f"[A-Za-z0-9_-]; got {alias!r}"
                )
        if "" in self.mirror_sources or len(set(self.mirror_sources)) != len(self.mirror_sources):
            raise ConfigError(
                f"mirror_sources: expected distinct aliases; got {self.mirror_sources}"
            )
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith("_partitions") or f.name in ("n_shards", "replication_factor"):
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ConfigError(f"{f.name}: expected an int >= 1; got {value!r}")
            elif f.name.endswith(("_ms", "_bytes")) and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise ConfigError(f"{f.name}: expected an int >= 1 (ms or bytes); got {value!r}")
        _imply_checkpointing(self)
        if not 1024 <= self.checkpoint_chunk_bytes <= 900 * 1024:
            raise ConfigError(
                f"checkpoint_chunk_bytes: expected 1024..{900 * 1024} (below the broker's "
                f"default 1 MB max.message.bytes); got {self.checkpoint_chunk_bytes}"
            )

    @property
    def topics(self) -> TopicNames:
        p = self.topic_prefix
        return TopicNames(
            kv_events=f"{p}kv-events",
            index_ops=f"{p}index-ops",
            index_patches=f"{p}index-patches",
            queue_vectors=f"{p}queue-vectors",
            migrations=f"{p}migrations",
            routing_decisions=f"{p}routing-decisions",
            dead_letters=f"{p}dead-letters",
            index_snapshots=f"{p}index-snapshots",
        )

    def mirrored(self, topic: str) -> tuple[str, ...]:
        """``topic`` and its MirrorMaker 2 copies from every ``mirror_sources`` cluster."""
        return (topic, *(f"{alias}.{topic}" for alias in self.mirror_sources))

    @property
    def patches_topic(self) -> str:
        """The ``index-patches`` topic edges of this cluster read (a copy if ``patches_source``)."""
        t = self.topics.index_patches
        return f"{self.patches_source}.{t}" if self.patches_source else t

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PipelineConfig:
        """From a parsed file section or CLI flags (``n-shards`` and ``n_shards`` both accepted);
        unknown keys are refused so that a typo is not silently a default."""
        derived = [f.name for f in fields(cls) if not f.init]
        return cls(
            **kwargs_from_mapping(cls, values, "pipeline config", exclude=derived, coerce=_coerce)
        )

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], base: Mapping[str, Any] | None = None
    ) -> PipelineConfig:
        """``base`` (e.g. a file's values) overridden by ``KVCOMPASS_<FIELD>`` vars of ``env``."""
        return cls.resolve(base, env, {})

    @classmethod
    def resolve(
        cls, file: Mapping[str, Any] | None, env: Mapping[str, str], flags: Mapping[str, Any]
    ) -> PipelineConfig:
        """The one precedence: ``flags`` (None values: not given) > ``env`` > ``file`` > the
        defaults. ``file`` and ``flags`` take field names (``n_shards`` or ``n-shards``)."""
        values: dict[str, Any] = {k.replace("-", "_"): v for k, v in (file or {}).items()}
        if env.get("KAFKA_BOOTSTRAP_SERVERS"):
            values["bootstrap_servers"] = env["KAFKA_BOOTSTRAP_SERVERS"]
        for f in fields(cls):
            if not f.init:
                continue
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is not None and raw != "":
                values[f.name] = raw
        values.update({k.replace("-", "_"): v for k, v in flags.items() if v is not None})
        return cls.from_mapping(values)


MIN_CHECKPOINT_PERIOD_MS = 1_000
_DEFAULT_PERIOD_MS = 60_000
_DEFAULT_MARGIN_MS = 10 * _MINUTE_MS


def implied_checkpointing(retention_ms: int, period_ms: int, margin_ms: int) -> tuple[int, int]:
    """``(checkpoint_period_ms, checkpoint_margin_ms)`` meeting the retention rule
    ``retention_ms > period + margin`` (recovery replays ``index-ops`` from the latest
    checkpoint), changed as little as it takes: unchanged if they meet it; else the margin kept
    and the period ``(retention - margin) / 2``; if that is under 1 s, the margin cut to half
    the retention and the period ``min(period, retention / 4)`` (a 5-minute retention with the
    defaults: 60 s and 150 s). ``ConfigError`` (one line) if no period of 1 s would do."""
    if retention_ms > period_ms + margin_ms:
        return period_ms, margin_ms
    if (retention_ms - margin_ms) // 2 >= MIN_CHECKPOINT_PERIOD_MS:
        return (retention_ms - margin_ms) // 2, margin_ms
    margin = retention_ms // 2
    period = min(period_ms, (retention_ms - margin) // 2)
    if period < MIN_CHECKPOINT_PERIOD_MS:
        raise ConfigError(
            f"index_ops_retention_ms: {retention_ms} is too short to checkpoint within (a period "
            f"of at least {MIN_CHECKPOINT_PERIOD_MS} ms and a margin of half the retention need "
            f"about {4 * MIN_CHECKPOINT_PERIOD_MS} ms); raise index-ops' retention"
        )
    return period, margin


def _imply_checkpointing(c: PipelineConfig) -> None:
    """The retention rule: with the checkpoint period and margin at their defaults, a shorter
    retention implies them (``implied_checkpointing``, noted in ``checkpointing_note``); set by
    hand, they must meet it, else one line says what to set."""
    retention, period, margin = (
        c.index_ops_retention_ms, c.checkpoint_period_ms, c.checkpoint_margin_ms
    )  # fmt: skip
    if retention > period + margin:
        return
    defaults = (period, margin) == (_DEFAULT_PERIOD_MS, _DEFAULT_MARGIN_MS)
    if not defaults:
        raise ConfigError(
            f"index_ops_retention_ms: expected > checkpoint_period_ms + checkpoint_margin_ms = "
            f"{period + margin} (recovery replays index-ops from the latest checkpoint); got "
            f"{retention}; set both lower (e.g. checkpoint_period_ms={retention // 4}, "
            f"checkpoint_margin_ms={retention // 2}) or leave both unset to have them implied"
        )
    new_period, new_margin = implied_checkpointing(retention, period, margin)
    object.__setattr__(c, "checkpoint_period_ms", new_period)
    object.__setattr__(c, "checkpoint_margin_ms", new_margin)
    object.__setattr__(
        c,
        "checkpointing_note",
        f"index_ops_retention_ms {retention} is below the default checkpoint_period_ms + "
        f"checkpoint_margin_ms = {period + margin}: checkpointing every {new_period} ms with a "
        f"margin of {new_margin} ms",
    )


SECURITY_FIELDS = ("security_protocol", "sasl_mechanism", "sasl_username", "sasl_password",
                   "ssl_ca_location", "ssl_certificate_location", "ssl_key_location",
                   "ssl_key_password", "ssl_check_hostname")  # fmt: skip
"""How clients reach the broker; secrets belong in the environment (``KVCOMPASS_SASL_PASSWORD``)
rather than in a config file (``resolve``: the environment beats a file, as for every field)."""
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_STRINGS = frozenset(
    {"bootstrap_servers", "topic_prefix", "patches_source", "security_protocol", "sasl_mechanism",
     "sasl_username", "sasl_password", "ssl_ca_location", "ssl_certificate_location",
     "ssl_key_location", "ssl_key_password"}
)  # fmt: skip


def _check_security(c: PipelineConfig) -> None:
    if c.security_protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(
            f"security_protocol: expected one of {', '.join(SECURITY_PROTOCOLS)}; got "
            f"{c.security_protocol!r}"
        )
    sasl = c.security_protocol.startswith("SASL_")
    if c.sasl_mechanism.upper() in ("AWS_MSK_IAM", "OAUTHBEARER"):
        raise ConfigError(
            f"sasl_mechanism: {c.sasl_mechanism} (MSK IAM) is not wired in this build; expected "
            f"one of {', '.join(SASL_MECHANISMS)} (MSK: SCRAM on port 9096)"
        )
    if sasl and c.sasl_mechanism not in SASL_MECHANISMS:
        raise ConfigError(
            f"sasl_mechanism: expected one of {', '.join(SASL_MECHANISMS)} with "
            f"{c.security_protocol}; got {c.sasl_mechanism!r}"
        )
    if sasl and not (c.sasl_username and c.sasl_password):
        raise ConfigError(
            f"sasl_username/sasl_password: expected both with {c.security_protocol}; got "
            f"username {c.sasl_username!r} and {'a' if c.sasl_password else 'no'} password"
        )
    if not sasl and (c.sasl_mechanism or c.sasl_username or c.sasl_password):
        raise ConfigError(
            f"sasl_*: expected none with security_protocol {c.security_protocol} (credentials "
            f"would not be used); set SASL_SSL or SASL_PLAINTEXT"
        )
    tls = c.security_protocol in ("SSL", "SASL_SSL")
    files = (c.ssl_ca_location, c.ssl_certificate_location, c.ssl_key_location)
    if not tls and any(files):
        raise ConfigError(
            f"ssl_*: expected none with security_protocol {c.security_protocol} (no TLS); got "
            f"{[f for f in files if f]}"
        )
    if bool(c.ssl_certificate_location) != bool(c.ssl_key_location):
        raise ConfigError(
            "ssl_certificate_location/ssl_key_location: expected both (mutual TLS) or neither"
        )


def _coerce(key: str, value: Any) -> Any:
    if key == "ssl_check_hostname":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected true or false; got {value!r}")
    if key == "schema_registry_url":
        return None if value in (None, "") else str(value)
    if key in _STRINGS:
        return str(value)
    if key == "mirror_sources":
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{key}: expected a list of aliases or 'a,b'; got {value!r}")
        return tuple(str(x).strip() for x in items if str(x).strip())
    if isinstance(value, str):
        try:
            return int(value.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{key}: expected an integer; got {value!r}") from None
    return value
