"""A stall watch for any ``assign``-ed consumer: records on the broker it does not advance to.

Owns the check the ``index-patches`` follower runs (``wire.patch_follower.check_stall``), for the
other consumers that follow topics by assignment (the edge's ``queue-vectors`` follower): every
period, compare how far the consumer read (its positions, and the records its owner ``note``s: a
partition dropped from the assignment has no position) with the broker's end offsets; a partition
with records past that and no progress over a whole period is a stall
(``wire.follower_watch.stalled``; a partition read from nowhere yet is never judged). It is logged
with the positions and watermarks, reported to ``on_stall``, and every partition is assigned again
where the consumer stands (a fresh start of librdkafka's partition state: after a broker restart a
consumer once sat on ``leader=-1`` for minutes, fetching nothing and saying nothing). Blocking:
call ``check`` from a worker thread. Must not read records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_END, KafkaException, TopicPartition

from wire.follower_watch import stalled

log = logging.getLogger(__name__)


class ConsumerWatch:
    """Watches ``consumer``'s progress on ``partitions`` ((topic, partition) pairs)."""

    def __init__(
        self,
        consumer: Any,
        partitions: Sequence[tuple[str, int]],
        what: str,
        on_stall: Callable[[list[tuple[str, int]]], None],
    ) -> None:
        self.consumer = consumer
        self.partitions = list(partitions)
        self.what = what
        self.on_stall = on_stall
        self.stalled: list[tuple[str, int]] = []
        self._before: dict[int, int] = {}
        self._index = {tp: i for i, tp in enumerate(self.partitions)}
        self._known: dict[int, int] = {}
        """The next offset to read of each partition, as far as anyone saw (the consumer's
        position, or a record the owner ``note``d): where a reassignment resumes."""

    def note(self, topic: str, partition: int, next_offset: int) -> None:
        """The owner consumed a record of (``topic``, ``partition``): ``next_offset`` is next."""
        i = self._index.get((topic, partition))
        if i is not None and next_offset > self._known.get(i, -1):
            self._known[i] = next_offset

    def _tps(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.partitions]

    def check(self, timeout_s: float = 2.0) -> list[tuple[str, int]]:
        """One check (blocking); the stalled (topic, partition) pairs, reassigned."""
        try:
            # a partition dropped from the assignment has no position: it reads nothing
            held = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
            positions = self.consumer.position(
                [TopicPartition(t, p) for t, p in self.partitions if (t, p) in held]
            )
            marks = {}
            for i, tp in enumerate(self._tps()):
                low, high = self.consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
                marks[i] = (int(low), int(high))
        except KafkaException as exc:  # a broker that does not answer is not this consumer's stall
            log.debug("%s watch: %s", self.what, exc)
            self._before = {}
            return self.stalled
        for tp in positions:
            if tp.offset >= 0:
                i = self._index[(tp.topic, tp.partition)]
                self._known[i] = max(self._known.get(i, -1), int(tp.offset))
        now = dict(self._known)
        stuck = stalled(self._before, now, marks)
        self._before = now
        self.stalled = [self.partitions[i] for i in stuck]
        if not stuck:
            return []
        log.warning(
            "%s consumer stalled on %s (no progress in a whole period with records to read): "
            "positions %s, broker low/high %s; assigning again",
            self.what, self.stalled, {self.partitions[i]: o for i, o in now.items()},
            {self.partitions[i]: m for i, m in marks.items()},
        )  # fmt: skip
        self.on_stall(self.stalled)
        self.consumer.assign([
            TopicPartition(t, p, self._known.get(i, OFFSET_END))
            for i, (t, p) in enumerate(self.partitions)
        ])  # fmt: skip
        return self.stalled
