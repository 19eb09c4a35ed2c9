"""``wire.follower_watch``: which partitions of the patch follower are stalled, and librdkafka's
statistics read back (no Kafka)."""

from __future__ import annotations

import json

from wire.follower_watch import PartitionView, behind, partition_views, stalled


def test_behind__counts_from_what_was_read_or_the_log_start() -> None:
    marks = {0: (0, 10), 1: (0, 0), 2: (5, 9), 3: (0, 4)}
    have = {0: 7, 1: -1, 2: -1, 3: 4}
    assert behind(have, marks) == {0: 3, 2: 4}  # 1 empty, 3 caught up; 2 starts at its low


def test_stalled__no_progress_over_a_period_with_records_to_read() -> None:
    marks = {0: (0, 10), 1: (0, 10), 2: (0, 10)}
    before = {0: 7, 1: 7, 2: 10}
    now = {0: 7, 1: 8, 2: 10}
    assert stalled(before, now, marks) == [0]  # 1 advanced, 2 has nothing to read


def test_stalled__first_check_is_only_a_baseline() -> None:
    assert stalled({}, {0: -1, 1: 3}, {0: (0, 10), 1: (0, 10)}) == []


def test_stalled__nothing_read_yet_and_still_nothing__is_a_stall() -> None:
    assert stalled({0: -1}, {0: -1}, {0: (0, 10)}) == [0]


def test_stalled__not_when_librdkafka_fetches_up_to_the_end() -> None:
    # the tail past the position was removed by compaction: nothing is unread
    marks = {0: (0, 10), 1: (0, 10)}
    views = {0: PartitionView(1, "active", 7, 10), 1: PartitionView(-1, "active", 7, -1)}
    assert stalled({0: 7, 1: 7}, {0: 7, 1: 7}, marks, views) == [1]


def test_partition_views__reads_librdkafka_statistics_of_the_topic() -> None:
    doc = {
        "topics": {
            "index-patches": {
                "partitions": {
                    "0": {"leader": -1, "fetch_state": "active", "next_offset": 3720,
                          "hi_offset": -1},
                    "-1": {"leader": -1, "fetch_state": "none"},
                }
            }
        }
    }  # fmt: skip
    views = partition_views(json.dumps(doc), "index-patches")
    assert views == {0: PartitionView(-1, "active", 3720, -1)}
    assert views[0].as_dict()["fetch_state"] == "active"
    assert partition_views(json.dumps(doc), "other") == {}
    assert partition_views("not json", "index-patches") == {}
