"""Maintenance unit: batched apply equals the all-shards core, recovery starts a fresh epoch."""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.ludo import PatchKind
from kvcompass.maintenance import MaintenanceUnit, Offsets, PatchScan, epoch_keys
from kvcompass.rechunk import OpBatch, OpKind
from kvcompass.types import Tier
from tests.kv_event_fixtures import LAYOUT, LEVELS, source

N = 2


def _batches(rng: np.random.Generator, n_events: int, shard: int) -> list[OpBatch]:
    out = []
    for i in range(n_events):
        worker = int(rng.integers(0, LAYOUT.n_workers))
        table, field_ = LAYOUT.field_of(worker)
        keys = rng.integers(0, 400, 6).astype(np.uint64) * np.uint64(N) + np.uint64(shard)
        r = rng.random()
        if r < 0.03:
            op, tier, keys = OpKind.CLEAR_FIELD, Tier.NONE, keys[:0]
        elif r < 0.3:
            op, tier = OpKind.REMOVE, Tier.NONE
        else:
            op, tier = OpKind.SET, Tier(int(rng.integers(1, 3)))
        out.append(OpBatch(shard, table, field_, op, tier, keys, source(i, worker)))
    return out


def _truth(batches: list[OpBatch]) -> DiscoveryIndex:
    idx = DiscoveryIndex(LAYOUT, n_shards=N)
    for b in batches:
        w = int(LAYOUT.field_workers[b.table, b.field])
        if b.op is OpKind.CLEAR_FIELD:
            idx.clear(w)
        elif b.op is OpKind.REMOVE:
            idx.evict(w, b.keys)
        else:
            idx.register(w, b.keys, b.tier)
    return idx


def test_batched_apply_equals_the_core__mixed_ops_in_chunks() -> None:
    rng = np.random.default_rng(1)
    batches = _batches(rng, 600, 1)
    unit = MaintenanceUnit(LAYOUT, 1, N, initial_capacity=64)
    unit.recover([], PatchScan(), 0)
    for lo in range(0, len(batches), 37):
        chunk = batches[lo : lo + 37]
        assert all(unit.check(b) is None for b in chunk)
        unit.apply(chunk, lo + len(chunk) - 1)
    truth = _truth(batches).shards[1]
    for t in range(LAYOUT.n_tables):
        keys, vals = truth.tables[t].items()
        assert [unit.holders_value(t, int(k)) for k in keys] == vals.tolist()
        assert len(unit.state.tables[t]) == len(truth.tables[t])
    assert unit.next_offset == len(batches)


def test_view_from_steps_matches_unit__growth_retires_old_epoch() -> None:
    rng = np.random.default_rng(2)
    unit = MaintenanceUnit(LAYOUT, 0, N, initial_capacity=16)
    view = IndexView(LAYOUT, LEVELS.matrix, N)
    retired: list = []
    steps = [unit.recover([], PatchScan(), 0)]
    batches = _batches(rng, 400, 0)
    for i, b in enumerate(batches):
        steps.append(unit.apply([b], i))
    for s in steps:
        view.apply_all(s.patches)
        retired.extend(s.retired)
    assert any(k[3] == int(PatchKind.HEADER) and k[2] == 0 for k in retired)  # epoch 0 retired
    for t in range(LAYOUT.n_tables):
        keys, vals = unit.state.tables[t].items()
        assert [view.lookup_value(t, int(k)) for k in keys] == vals.tolist()


def test_recover_starts_above_every_seen_epoch_and_seq__scan() -> None:
    rng = np.random.default_rng(3)
    history = list(enumerate(_batches(rng, 200, 1)))
    scan = PatchScan()
    scan.observe((0, 1, 4, int(PatchKind.HEADER), 0), 90)
    scan.observe((0, 1, 4, int(PatchKind.BUCKET), 3), 91)
    scan.observe((0, 1, 3, int(PatchKind.BUCKET), 3), None)
    unit = MaintenanceUnit(LAYOUT, 1, N, initial_capacity=64)
    step = unit.recover(history, scan, 200)
    assert [p.table for p in step.patches] == list(range(LAYOUT.n_tables))
    assert step.patches[0].batch.params.epoch == 5
    assert all(p.batch.header and p.batch.commit for p in step.patches)
    assert min(p.seq for p in step.patches) == 92
    assert sorted(step.retired) == sorted(scan.live)
    truth = _truth([b for _, b in history]).shards[1]
    keys, vals = truth.tables[0].items()
    assert [unit.holders_value(0, int(k)) for k in keys] == vals.tolist()
    assert unit.position(200) is Offsets.NEXT
    assert unit.position(150) is Offsets.SEEN
    assert unit.position(201) is Offsets.GAP


@pytest.mark.parametrize(
    ("change", "needle"),
    [({"shard": 0}, "shard"), ({"table": 99}, "table"), ({"field": 31}, "field"),
     ({"keys": np.array([2], np.uint64)}, "keys"), ({"tier": Tier.NONE}, "tier")],
)  # fmt: skip
def test_check_names_the_problem__invalid_batch(change: dict, needle: str) -> None:
    good = OpBatch(1, 0, 0, OpKind.SET, Tier.VRAM, np.array([3], np.uint64), source())
    unit = MaintenanceUnit(LAYOUT, 1, N)
    assert unit.check(good) is None
    fields = {f: getattr(good, f) for f in good.__slots__}  # type: ignore[attr-defined]
    reason = unit.check(OpBatch(**{**fields, **change}))
    assert reason is not None and reason.startswith(needle)


def test_epoch_keys_cover_header_commit_buckets_words__params() -> None:
    unit = MaintenanceUnit(LAYOUT, 0, N, initial_capacity=32)
    p = unit.state.tables[0].params
    keys = epoch_keys(0, 0, p)
    assert len(keys) == len(set(keys)) == 2 + p.n_buckets + p.n_locator_words
