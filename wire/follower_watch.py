"""Stall watch of the edge's ``index-patches`` follower: is it still reading what the broker has?

Owns the decision (pure: no Kafka, no clock, no logging) and the summary of librdkafka's own view
of each partition (from its statistics JSON: leader, fetch state, offsets) that a stall report
prints. The follower (``wire.patch_follower.PatchFollower``) asks every ``patch_stall_check_ms``;
what it does with the answer (log, report, re-assign) is its own.

Why it exists: in one clean-clone CI run, after the test's broker was stopped and started again on
the same data, an edge stopped applying ``index-patches`` for over 180 s while the broker had the
records; its log had only librdkafka's reconnect lines. In a targeted run (an in-process edge, the
broker restarted while the edge's event loop was busy), librdkafka still reported every partition
``fetch_state=active``, ``leader=-1``, ``hi_offset=-1`` 90 s after the broker was back and
answering other clients. The edge had no way to notice; now it does, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PartitionView:
    """librdkafka's state of one partition, from its statistics (``STATISTICS.md`` names)."""

    leader: int
    """Broker id of the leader the client knows; -1: none."""
    fetch_state: str
    """``none``, ``offset-query``, ``offset-wait``, ``validate-epoch-wait``, ``active``, ..."""
    next_offset: int
    """Next offset the client will fetch."""
    hi_offset: int
    """High watermark of the last fetch response; -1: none."""

    def as_dict(self) -> dict[str, Any]:
        return {"leader": self.leader, "fetch_state": self.fetch_state,
                "next_offset": self.next_offset, "hi_offset": self.hi_offset}  # fmt: skip


def partition_views(stats_json: str, topic: str) -> dict[int, PartitionView]:
    """Partition -> state of ``topic`` in one librdkafka statistics document (empty if absent)."""
    try:
        parts = json.loads(stats_json)["topics"][topic]["partitions"]
    except (ValueError, KeyError, TypeError):
        return {}
    out: dict[int, PartitionView] = {}
    for key, p in parts.items():
        if key == "-1":  # librdkafka's internal unassigned-partition entry
            continue
        out[int(key)] = PartitionView(
            int(p.get("leader", -1)),
            str(p.get("fetch_state", "?")),
            int(p.get("next_offset", -1)),
            int(p.get("hi_offset", -1)),
        )
    return out


def behind(have: Mapping[int, int], marks: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Partition -> records the broker has past ``have`` (the next offset to read; a partition
    missing from ``have`` has read nothing, so it starts at its log start), for partitions with
    any. ``marks``: partition -> (low, high) watermarks."""
    out = {}
    for p, (low, high) in marks.items():
        start = max(have.get(p, low), low)
        if high > start:
            out[p] = high - start
    return out


def fetching_to_end(view: PartitionView | None, high: int) -> bool:
    """Whether librdkafka says it fetches the partition from a leader and has seen ``high``: the
    records between the position and the end are then gone (compaction removed the tail), not
    unread."""
    return (
        view is not None and view.leader >= 0 and view.fetch_state == "active"
        and view.hi_offset >= high
    )  # fmt: skip


def stalled(
    before: Mapping[int, int],
    now: Mapping[int, int],
    marks: Mapping[int, tuple[int, int]],
    views: Mapping[int, PartitionView] | None = None,
) -> list[int]:
    """Partitions that have records to read and did not advance between two checks.

    ``before`` and ``now``: partition -> next offset to read at the previous and at this check
    (missing: nothing read). A partition seen for the first time (absent from ``before``) is never
    stalled: one check is no evidence; it takes a whole period without progress. ``views``:
    librdkafka's state (``partition_views``); a partition it fetches up to the end is not
    stalled (``fetching_to_end``)."""
    lagging = behind(now, marks)
    v = views or {}
    return sorted(
        p for p in lagging
        if p in before and now.get(p, -1) <= before[p]
        and not fetching_to_end(v.get(p), marks[p][1])
    )  # fmt: skip
