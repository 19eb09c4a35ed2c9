"""Order per worker (issue 26 item 5): which of a worker's events may be applied, by engine_seq.

A worker's field of the index is the result of its events applied in order; the live pipeline
(``pipeline.shell``), the offline ``kvcompass replay`` and a shard's rebuild from ``kv-events``
must apply the same ones in the same order, or they disagree (one worker's 600 events on two
partitions once made the live index and the replay differ on 300 of 300 keys). The Kafka key
check (``wire.codec.worker_key_mismatch``) keeps one worker's events on one partition, hence in
one order; this module enforces that the order is the worker's own: an event is applied only if
its ``engine_seq`` is above the last applied one of its worker (``KvEvent.engine_seq`` is
increasing per worker, ``workers.bridge``). Everything else is:

- ``REDELIVERED``: the same partition at or below the offset of the worker's last applied event
  (Kafka's at-least-once re-delivery): already handled, skipped, counted;
- ``LATE``: a duplicate or out-of-order event (a second producer for the worker, a replayed
  file, a reporter whose clock went back): a dead letter with the reason, never applied.

Decisions are data: ``judge`` says, ``accept`` records; ``copy`` gives a scratch order for a take
that may fail and be retried (its verdicts are committed only once its output is delivered).

Must not: know Kafka or records (the callers pass plain numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Verdict(Enum):
    APPLY = "apply"
    REDELIVERED = "redelivered"
    LATE = "late"


@dataclass(frozen=True, slots=True)
class Applied:
    """Where a worker's last applied event was."""

    engine_seq: int
    partition: int
    offset: int


@dataclass
class EventOrder:
    """Per worker, the last applied event; ``judge`` each next one."""

    last: dict[int, Applied] = field(default_factory=dict)

    def judge(self, worker: int, engine_seq: int, partition: int, offset: int) -> Verdict:
        prev = self.last.get(worker)
        if prev is None:
            return Verdict.APPLY
        if partition == prev.partition and offset <= prev.offset:
            return Verdict.REDELIVERED
        return Verdict.APPLY if engine_seq > prev.engine_seq else Verdict.LATE

    def accept(self, worker: int, engine_seq: int, partition: int, offset: int) -> None:
        self.last[worker] = Applied(engine_seq, partition, offset)

    def why_late(self, worker: int, engine_seq: int) -> str:
        """The dead letter's reason for a ``LATE`` event."""
        prev = self.last[worker]
        return (
            f"engine_seq: expected > {prev.engine_seq} (worker {worker}'s last applied event, "
            f"partition {prev.partition} offset {prev.offset}); got {engine_seq}: a duplicate or "
            f"out-of-order event is not applied"
        )

    def copy(self) -> EventOrder:
        return EventOrder(dict(self.last))
