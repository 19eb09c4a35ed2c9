"""``kvcompass.op_runs``: a take split at once equals its events split one by one."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.op_runs import Runs, concat, split_take
from kvcompass.rechunk import EventRef, OpBatch, OpKind, Planned
from kvcompass.types import Tier

N_SHARDS = 3


@st.composite
def planned_events(draw: st.DrawFn) -> Planned:
    kind = draw(st.sampled_from(["set", "remove", "clear"]))
    table, field_ = draw(st.integers(0, 2)), draw(st.integers(0, 15))
    if kind == "clear":
        return Planned(table, field_, OpKind.CLEAR_FIELD, Tier.NONE, None)
    keys = np.array(draw(st.lists(st.integers(1, 2**63 - 1), max_size=12)), np.uint64)
    if kind == "remove":
        return Planned(table, field_, OpKind.REMOVE, Tier.NONE, keys)
    return Planned(table, field_, OpKind.SET, draw(st.sampled_from([Tier.VRAM, Tier.DRAM])), keys)


def _one_by_one(planned: list[Planned], sources: list[EventRef]) -> dict[int, list[OpBatch]]:
    """The obviously correct twin: every event split alone, concatenated per shard."""
    out: dict[int, list[OpBatch]] = {}
    for p, src in zip(planned, sources, strict=True):
        for s in range(N_SHARDS):
            if p.keys is None:
                empty = np.zeros(0, np.uint64)
                out.setdefault(s, []).append(OpBatch(s, p.table, p.field, p.op, p.tier, empty, src))
                continue
            mine = p.keys[p.keys % np.uint64(N_SHARDS) == s]
            if mine.size:
                out.setdefault(s, []).append(OpBatch(s, p.table, p.field, p.op, p.tier, mine, src))
    return out


def _same(a: list[OpBatch], b: list[OpBatch]) -> bool:
    return len(a) == len(b) and all(
        (x.shard, x.table, x.field, x.op, x.tier, x.source)
        == (y.shard, y.table, y.field, y.op, y.tier, y.source)
        and np.array_equal(x.keys, y.keys)
        for x, y in zip(a, b, strict=True)
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(planned_events(), max_size=20))
def test_split_take_equals_the_events_split_one_by_one(planned: list[Planned]) -> None:
    sources = [EventRef(i % 5, i, "kv", 0, i, 0) for i in range(len(planned))]
    want = _one_by_one(planned, sources)
    got = split_take(planned, sources, N_SHARDS)
    assert [r.shard for r in got] == sorted(want)
    for runs in got:
        assert _same(runs.batches(), want[runs.shard])
        again = Runs.from_batches(runs.shard, runs.batches())  # round trip through OpBatch
        assert _same(again.batches(), want[runs.shard])
        halves = concat(runs.shard, [runs.take(np.arange(0, len(runs) // 2)),
                                     runs.take(np.arange(len(runs) // 2, len(runs)))])  # fmt: skip
        assert _same(halves.batches(), want[runs.shard])
