"""Rechunk: one decoded ``KvEvent`` -> its runs of index ops per shard (pure).

Owns the mapping from a worker's cache event to index operations (paper §3.4 Insert/Update/
Remove): which keys (the event's ``registration_keys``, else ``token_ids`` hashed at the
registration lengths of the worker's region that fit ``token_count``), which (table, field) (the
deployment's layout), which op and tier, and the split by shard (``kvcompass.shards``). Invalid
events raise ``InvalidEvent`` with the dead-letter reason code; the shell files them. The shell
packs the runs of a whole take into one ``IndexOpBatch`` record per shard
(``wire.index_ops.encode_op_batch``).

Must not: talk to Kafka or decode bytes (the agent does), or keep state between events (rechunk is
stateless, so a re-delivered event yields the same records again: harmless, see
``pipeline/README.md``).

Semantics of a ``token_ids``-only event: STORED/TIER_MOVED set the field at every registration
length <= token_count (a KV cache is prefix-closed); REMOVED clears it at every such length, so a
producer that evicts only a tail must send ``registration_keys`` of the affected lengths (the
sidecar's bridge always does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError, UnknownWorkerError
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.types import Tier

MAX_KEYS_PER_EVENT = 4096
"""More registration keys than any deployment has levels: larger is an OVERSIZE dead letter."""


class OpKind(IntEnum):
    """The ``op`` code of a run in an ``IndexOpBatch`` (and the ``IndexOpKind`` symbol order)."""

    SET = 0
    REMOVE = 1
    CLEAR_FIELD = 2


class InvalidEvent(InvalidInputError):
    """An event that cannot become index ops; ``reason_code`` is its ``DeadLetterReason``."""

    reason_code: ClassVar[str] = "INVALID"

    def __init__(self, reason: str, reason_code: str = "INVALID") -> None:
        super().__init__(reason)
        self.code = reason_code


@dataclass(frozen=True, slots=True)
class EventRef:
    """Where ops came from (the ``EventRef`` record)."""

    worker_id: int
    engine_seq: int
    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    produced_ms: int = -1
    """Kafka timestamp of the event's ``kv-events`` record (its producer's clock; -1 unknown)."""

    def to_record(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "engine_seq": self.engine_seq,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "timestamp_ms": self.timestamp_ms,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> EventRef:
        return cls(
            int(r["worker_id"]),
            int(r["engine_seq"]),
            str(r["topic"]),
            int(r["partition"]),
            int(r["offset"]),
            int(r["timestamp_ms"]),
        )


@dataclass(frozen=True, slots=True)
class OpBatch:
    """One run: one event's change to one worker's field of ``keys`` (all in ``shard``)."""

    shard: int
    table: int
    field: int
    op: OpKind
    tier: Tier
    keys: NDArray[np.uint64]
    source: EventRef

    @property
    def code(self) -> int:
        """The 2-bit value written (0 for REMOVE and CLEAR_FIELD)."""
        return int(self.tier) if self.op is OpKind.SET else 0


@dataclass(frozen=True, slots=True)
class Planned:
    """One valid event's change before the split by shard: ``keys`` None for CLEARED (a
    CLEAR_FIELD of the worker's field in every shard), else the keys (maybe none) it sets or
    clears."""

    table: int
    field: int
    op: OpKind
    tier: Tier
    keys: NDArray[np.uint64] | None


def by_shard(batches: Sequence[OpBatch]) -> dict[int, list[OpBatch]]:
    """Runs grouped by shard, each group in input order."""
    out: dict[int, list[OpBatch]] = {}
    for b in batches:
        out.setdefault(b.shard, []).append(b)
    return out


def check_lengths(event: Mapping[str, Any]) -> None:
    """Raise ``InvalidEvent`` on a negative or zero length the event's schema cannot exclude:
    ``token_count`` < 0, ``block_size_tokens`` < 1, a registration length < 1, or
    ``registration_lengths`` and ``registration_keys`` of different sizes."""
    count = int(event["token_count"])
    if count < 0:
        raise InvalidEvent(f"token_count: expected >= 0; got {count}")
    block = int(event.get("block_size_tokens", 16))
    if block < 1:
        raise InvalidEvent(f"block_size_tokens: expected >= 1; got {block}")
    lengths = event.get("registration_lengths")
    if lengths is not None:
        arr = np.asarray(lengths, dtype=np.int64)
        if arr.size and int(arr.min()) < 1:
            bad = arr[arr < 1][:8].tolist()
            raise InvalidEvent(f"registration_lengths: expected lengths >= 1; got {bad}")
        keys = event.get("registration_keys")
        if keys is not None and len(keys) != len(lengths):
            raise InvalidEvent(
                f"registration_lengths: expected one per registration key ({len(keys)}); got "
                f"{len(lengths)}"
            )


class Rechunker:
    """Turns KvEvents of one deployment into per-shard op batches."""

    def __init__(self, layout: TableLayout, levels: Levels, worker_region: NDArray[np.int64],
                 n_shards: int) -> None:  # fmt: skip
        if n_shards < 1:
            raise InvalidInputError(f"n_shards: expected >= 1; got {n_shards}")
        self.layout = layout
        self.levels = levels
        self.worker_region = np.asarray(worker_region, dtype=np.int64)
        self.n_shards = n_shards
        self._hashers: dict[tuple[str, str | None], PrefixHasher] = {}

    def _hasher(self, model: str, group: str | None) -> PrefixHasher:
        h = self._hashers.get((model, group))
        if h is None:
            h = PrefixHasher(KeyNamespace(model, sharing_group=group))
            self._hashers[(model, group)] = h
        return h

    def keys_of(self, event: Mapping[str, Any]) -> NDArray[np.uint64]:
        """The event's prefix keys: given ones, or token_ids hashed at the fitting lengths."""
        given = event.get("registration_keys")
        if given is not None:
            if len(given) > MAX_KEYS_PER_EVENT:
                raise InvalidEvent(
                    f"registration_keys: expected <= {MAX_KEYS_PER_EVENT}; got {len(given)}",
                    "OVERSIZE",
                )
            arr = np.asarray(given, dtype=np.int64)
            if arr.size and int(arr.min()) < 0:
                raise InvalidEvent("registration_keys: expected non-negative 63-bit keys")
            return arr.astype(np.uint64)
        raw = event.get("token_ids")
        if raw is None:
            raise InvalidEvent(
                "expected registration_keys or token_ids; got neither (a block chain alone "
                "cannot be keyed by the pipeline)"
            )
        count = int(event["token_count"])
        if len(raw) != 4 * count:
            raise InvalidEvent(
                f"token_ids: expected 4*token_count = {4 * count} bytes; got {len(raw)}"
            )
        region = int(event["region_id"])
        lengths = self.levels.registration_lengths(region)
        lengths = lengths[lengths <= count]
        if lengths.size == 0:
            return np.zeros(0, dtype=np.uint64)
        tokens = np.frombuffer(raw, dtype="<i4")
        try:
            return self._hasher(str(event["model"]), event.get("sharing_group")).keys_at(
                tokens, lengths
            )
        except InvalidInputError as exc:
            raise InvalidEvent(f"token_ids: {exc}") from exc

    def rechunk(self, event: Mapping[str, Any], source: EventRef) -> list[OpBatch]:
        """Op batches of one event, one per shard touched, shards ascending."""
        from kvcompass.op_runs import split_take  # op_runs builds on this module

        return [b for runs in split_take([self.plan(event)], [source], self.n_shards)
                for b in runs.batches()]  # fmt: skip

    def plan(self, event: Mapping[str, Any]) -> Planned:
        """What one event does, before the split by shard (``kvcompass.op_runs.split_take``);
        ``InvalidEvent`` (with its dead-letter code) if it cannot be applied."""
        check_lengths(event)
        worker = int(event["worker_id"])
        try:
            table, field_ = self.layout.field_of(worker)
        except UnknownWorkerError as exc:
            raise InvalidEvent(str(exc), "UNKNOWN_WORKER") from exc
        region = int(event["region_id"])
        if region != int(self.worker_region[worker]):
            raise InvalidEvent(
                f"region_id: worker {worker} is in region {int(self.worker_region[worker])}; "
                f"got {region}"
            )
        kind, tier = str(event["op"]), Tier[str(event["tier"])]
        if kind == "CLEARED":
            return Planned(table, field_, OpKind.CLEAR_FIELD, Tier.NONE, None)
        if kind in ("STORED", "TIER_MOVED"):
            if tier is Tier.NONE:
                raise InvalidEvent(f"tier: expected VRAM or DRAM for {kind}; got NONE")
            op = OpKind.SET
        elif kind == "REMOVED":
            op, tier = OpKind.REMOVE, Tier.NONE
        else:
            raise InvalidEvent(f"op: expected a KvOp symbol; got {kind!r}")
        return Planned(table, field_, op, tier, self.keys_of(event))
