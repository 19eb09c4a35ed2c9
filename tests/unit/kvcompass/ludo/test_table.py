"""LudoTable against a dict, views built from its patches, and the table's invariants.

The central property: for any sequence of ``update``/``clear_bits`` calls, (a) a view that applies
every emitted batch in order and (b) a view built only from the latest image per (epoch, kind,
index) — what a compacted topic keeps — both equal the table's own view arrays and answer every
live key exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import LudoParams, LudoTable, LudoView, PatchBatch, PatchKind
from tests import naive


@dataclass
class Compacted:
    """Latest image per (epoch, kind, index), as a compacted topic keeps them."""

    params: dict[int, LudoParams] = field(default_factory=dict)
    images: dict[tuple[int, int, int], tuple[int, tuple[int, ...], tuple[int, ...]]] = field(
        default_factory=dict
    )

    def add(self, b: PatchBatch) -> None:
        e = b.params.epoch
        self.params[e] = b.params
        for i, bid in enumerate(b.bucket_ids.tolist()):
            self.images[(e, PatchKind.BUCKET, bid)] = (
                int(b.bucket_seeds[i]),
                tuple(b.bucket_values[i].tolist()),
                tuple(b.bucket_fps[i].tolist()),
            )
        for i, wid in enumerate(b.word_ids.tolist()):
            self.images[(e, PatchKind.LOCATOR_WORD, wid)] = (int(b.words[i]), (), ())

    def view(self) -> LudoView:
        epoch = max(self.params)
        p = self.params[epoch]
        buckets = sorted(i for (e, k, i) in self.images if e == epoch and k == PatchKind.BUCKET)
        words = sorted(i for (e, k, i) in self.images if e == epoch and k == PatchKind.LOCATOR_WORD)
        img = self.images
        batch = PatchBatch(
            params=p,
            header=True,
            bucket_ids=np.array(buckets, np.int64),
            bucket_seeds=np.array([img[(epoch, 1, b)][0] for b in buckets], np.uint8),
            bucket_values=np.array([img[(epoch, 1, b)][1] for b in buckets], np.uint64).reshape(
                -1, 4
            ),
            bucket_fps=np.array([img[(epoch, 1, b)][2] for b in buckets], np.uint16).reshape(-1, 4),
            word_ids=np.array(words, np.int64),
            words=np.array([img[(epoch, 2, w)][0] for w in words], np.uint64),
            commit=True,
        )
        v = LudoView.empty(p)
        v.apply(batch)
        return v


def _assert_view_matches(view: LudoView, table: LudoTable) -> None:
    assert view.params == table.params
    mine, theirs = view.arrays, table.view_arrays()
    for name in ("seeds", "values", "fps", "locator"):
        assert np.array_equal(getattr(mine, name), getattr(theirs, name)), name


def _random_ops(
    rng: np.random.Generator, pool: np.ndarray, n: int, value_bits: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys = pool[rng.integers(0, pool.shape[0], n)]
    fields = value_bits // 2
    worker = rng.integers(0, fields, n).astype(np.uint64)
    tier = rng.integers(0, 3, n).astype(np.uint64)  # 0 = the worker dropped it
    clears = np.uint64(3) << (np.uint64(2) * worker)
    sets = tier << (np.uint64(2) * worker)
    return keys, clears, sets


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(4, 600),
    value_bits=st.sampled_from([32, 64]),
    fp_bits=st.sampled_from([0, 8, 16]),
    seed=st.integers(0, 2**32),
    n_batches=st.integers(1, 12),
    pool_factor=st.floats(0.5, 4.0),
    clear_every=st.integers(0, 5),
)
def test_views_from_patches__equal_table__any_op_sequence(
    capacity: int,
    value_bits: int,
    fp_bits: int,
    seed: int,
    n_batches: int,
    pool_factor: float,
    clear_every: int,
) -> None:
    rng = np.random.default_rng(seed)
    pool = np.unique(rng.integers(0, 2**63, max(8, int(capacity * pool_factor)), np.uint64))
    table = LudoTable(capacity, value_bits=value_bits, fp_bits=fp_bits, seed=seed)
    ref = naive.NaiveLudoTable()
    seq = LudoView.empty(table.params)
    compacted = Compacted()
    compacted.add(PatchBatch.empty(table.params))
    for step in range(n_batches):
        if clear_every and step % clear_every == clear_every - 1:
            mask = int(rng.integers(0, 2**value_bits - 1, dtype=np.uint64))
            batch = table.clear_bits(mask)
            ref.clear_bits(mask)
        else:
            n = int(rng.integers(1, 2 * capacity + 2))
            keys, clears, sets = _random_ops(rng, pool, n, value_bits)
            batch = table.update(keys, clears, sets)
            ref.update(keys, clears, sets)
        if batch.params.epoch != seq.params.epoch:
            assert batch.header and batch.commit
            seq = LudoView.empty(batch.params)
        seq.apply(batch)
        compacted.add(batch)
        assert table.get(pool).tolist() == ref.get(pool)
    assert naive.ludo_table_invariants(table) == []
    live = np.array(sorted(ref.d), np.uint64)
    expect = np.array([ref.d[k] for k in live.tolist()], np.uint64)
    for view in (seq, compacted.view()):
        _assert_view_matches(view, table)
        assert np.array_equal(view.lookup(live), expect)
        gone = np.setdiff1d(pool, live)
        got = view.lookup(gone)
        arrays = view.arrays
        for k, g in zip(gone.tolist(), got.tolist(), strict=True):
            assert g == naive.naive_lookup(view.params, arrays, k)
            pos = naive.ludo_position(view.params, arrays, k)
            if int(table._st.skeys[pos]) == naive.MASK64:
                assert g == 0


def test_update__returns_deduplicated_sorted_images() -> None:
    t = LudoTable(1000, seed=3)
    keys = np.arange(1, 301, dtype=np.uint64)
    ones = np.ones(300, np.uint64)
    b = t.update(
        np.concatenate([keys, keys]), np.zeros(600, np.uint64), np.concatenate([ones, 2 * ones])
    )
    assert np.all(np.diff(b.bucket_ids) > 0)
    assert np.all(np.diff(b.word_ids) > 0)
    assert t.get(keys).tolist() == [3] * 300
    assert not b.header and not b.commit and b.params.epoch == 0


def test_update__removal_clears_slot_and_view_stops_naming_holder() -> None:
    t = LudoTable(200, seed=5)
    keys = np.arange(10, 110, dtype=np.uint64)
    v = LudoView.empty(t.params)
    v.apply(t.update(keys, np.zeros(100, np.uint64), np.full(100, 0b01, np.uint64)))
    assert v.lookup(keys).tolist() == [1] * 100
    b = t.update(keys[:50], np.full(50, 0b11, np.uint64), np.zeros(50, np.uint64))
    v.apply(b)
    assert len(t) == 50 and b.word_ids.shape[0] == 0  # deletes never change locator cells
    assert t.get(keys[:50]).tolist() == [0] * 50
    pos = [naive.ludo_position(v.params, v.arrays, int(k)) for k in keys[:50]]
    empty = [int(t._st.skeys[p]) == naive.MASK64 for p in pos]
    assert all(g == 0 for g, e in zip(v.lookup(keys[:50]).tolist(), empty, strict=True) if e)
    assert v.lookup(keys[50:]).tolist() == [1] * 50


def test_update__growth_emits_full_image_of_next_epoch() -> None:
    t = LudoTable(64, seed=7)
    keys = np.arange(1, 501, dtype=np.uint64)
    b = t.update(keys, np.zeros(500, np.uint64), np.ones(500, np.uint64))
    assert t.epoch >= 1 and t.capacity >= 512 and len(t) == 500
    assert b.header and b.commit and b.params == t.params
    assert b.bucket_ids.tolist() == list(range(t.params.n_buckets))
    assert b.word_ids.tolist() == list(range(t.params.n_locator_words))
    v = LudoView.empty(b.params)
    v.apply(b)
    assert v.committed
    assert v.lookup(keys).tolist() == [1] * 500


def test_update__placement_failure_grows__grow_at_one() -> None:
    t = LudoTable(4, seed=11, grow_at=1.0)
    keys = np.arange(1, 41, dtype=np.uint64)
    for k in keys:
        t.update(np.array([k], np.uint64), np.zeros(1, np.uint64), np.ones(1, np.uint64))
    assert t.epoch >= 1
    assert t.get(keys).tolist() == [1] * 40
    assert naive.ludo_table_invariants(t) == []


def test_update__locator_cycle_rebuilds_with_new_seed_same_epoch() -> None:
    rebuilt = []
    for seed in range(40):
        t = LudoTable(40, seed=seed)
        v = LudoView.empty(t.params)
        keys = np.random.default_rng(seed).integers(0, 2**63, 40, np.uint64)
        for k in keys:
            old_seed = t.params.locator_seed
            b = t.update(np.array([k], np.uint64), np.zeros(1, np.uint64), np.ones(1, np.uint64))
            if b.params.epoch != v.params.epoch:
                v = LudoView.empty(b.params)
            v.apply(b)
            if b.header and not b.commit:
                rebuilt.append(seed)
                assert b.params.locator_seed != old_seed
                assert b.word_ids.tolist() == list(range(t.params.n_locator_words))
        assert v.lookup(keys).tolist() == [1] * 40
        assert naive.ludo_table_invariants(t) == []
    assert rebuilt, "no locator rebuild was exercised"


def test_clear_bits__removes_zeroed_entries_and_keeps_others() -> None:
    t = LudoTable(100, seed=2)
    keys = np.arange(1, 81, dtype=np.uint64)
    vals = np.where(keys % 2 == 0, 0b01, 0b0101).astype(np.uint64)
    t.update(keys, np.zeros(80, np.uint64), vals)
    b = t.clear_bits(0b11)
    assert len(t) == 40
    assert t.get(keys).tolist() == [0 if k % 2 == 0 else 0b0100 for k in range(1, 81)]
    assert b.bucket_ids.shape[0] > 0


def test_items__returns_every_live_pair() -> None:
    t = LudoTable(100, value_bits=64, seed=4)
    keys = np.arange(5, 65, dtype=np.uint64)
    vals = (keys << np.uint64(40)) | np.uint64(1)
    t.update(keys, np.zeros(60, np.uint64), vals)
    k, v = t.items()
    assert dict(zip(k.tolist(), v.tolist(), strict=True)) == dict(
        zip(keys.tolist(), vals.tolist(), strict=True)
    )


def test_false_holders__fp8_at_95_percent_load_below_one_percent() -> None:
    t = LudoTable(20_000, fp_bits=8, seed=9)
    n = int(0.949 * t.params.n_slots)
    rng = np.random.default_rng(9)
    keys = np.unique(rng.integers(0, 2**62, n + 100, np.uint64))[:n]
    t.update(keys, np.zeros(n, np.uint64), np.ones(n, np.uint64))
    assert t.epoch == 0 and t.occupancy > 0.94
    v = LudoView.empty(t.params)
    v.apply(t.full_image())
    never = rng.integers(2**62, 2**63, 200_000, np.uint64)
    assert (v.lookup(never) != 0).mean() < 0.01
    assert v.lookup(keys).tolist() == [1] * n


def test_same_seed__same_patches() -> None:
    def run() -> list[int]:
        t = LudoTable(50, seed=21)
        keys = np.arange(1, 200, dtype=np.uint64)
        b = t.update(keys, np.zeros(199, np.uint64), np.ones(199, np.uint64))
        return [int(v) for v in b.bucket_values.ravel()] + [int(w) for w in b.words]

    assert run() == run()


@pytest.mark.parametrize(
    ("keys", "clears", "sets", "match"),
    [
        (np.array([1], np.int64), np.zeros(1, np.uint64), np.ones(1, np.uint64), "keys"),
        (np.array([2**63], np.uint64), np.zeros(1, np.uint64), np.ones(1, np.uint64), "2\\*\\*63"),
        (np.array([1], np.uint64), np.zeros(2, np.uint64), np.ones(1, np.uint64), "clear_masks"),
        (np.array([1], np.uint64), np.zeros(1, np.uint64), np.ones((1, 1), np.uint64), "set_bits"),
        (np.array([1], np.uint64), np.zeros(1, np.uint64), np.array([2**32], np.uint64), "32-bit"),
    ],
)
def test_update__invalid_input_raises(
    keys: np.ndarray, clears: np.ndarray, sets: np.ndarray, match: str
) -> None:
    with pytest.raises(InvalidInputError, match=match):
        LudoTable(10).update(keys, clears, sets)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"capacity": 0}, "capacity"),
        ({"capacity": 10, "grow_at": 1.5}, "grow_at"),
        ({"capacity": 10, "seed": -1}, "seed"),
        ({"capacity": 10, "value_bits": 48}, "value_bits"),
    ],
)
def test_table__invalid_construction_raises(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        LudoTable(**kwargs)  # type: ignore[arg-type]


def test_clear_bits__invalid_mask_raises() -> None:
    with pytest.raises(InvalidInputError, match="mask"):
        LudoTable(10).clear_bits(-1)


def test_bfs_visit_stamps__restart_before_int32_wrap() -> None:
    from kvcompass.ludo.cuckoo import STAMP_LIMIT
    from kvcompass.ludo.state import M_STAMP

    t = LudoTable(2000, seed=13)
    t._st.meta[M_STAMP] = STAMP_LIMIT - 3
    keys = np.random.default_rng(13).integers(0, 2**63, int(0.94 * t.params.n_slots), np.uint64)
    t.update(keys, np.zeros(keys.shape[0], np.uint64), np.ones(keys.shape[0], np.uint64))
    assert t.epoch == 0 and t.stats()["bfs_searches"] > 3  # so the stamps did wrap
    assert 0 < int(t._st.meta[M_STAMP]) < STAMP_LIMIT
    assert naive.ludo_table_invariants(t) == []
    assert t.get(keys).tolist() == [1] * keys.shape[0]


@settings(max_examples=40, deadline=None)
@given(
    value_bits=st.sampled_from([32, 64]),
    fp_bits=st.sampled_from([0, 8, 16]),
    rounds=st.lists(st.lists(st.integers(1, 400), min_size=1, max_size=30), max_size=6),
)
def test_dirty_images_kernel__matches_the_numpy_twin(
    value_bits: int, fp_bits: int, rounds: list[list[int]]
) -> None:
    from kvcompass.ludo import ops
    from kvcompass.ludo.state import M_ALLW, M_NB, M_NW

    table = LudoTable(1024, value_bits=value_bits, fp_bits=fp_bits, seed=5)
    for r, ks in enumerate(rounds):
        keys = np.array(ks, np.uint64)
        clears = np.full(keys.size, 0b11 << 4, np.uint64)
        sets = np.full(keys.size, (r % 3) << 4, np.uint64)
        status, _ = ops.update_batch(table._st.mem, keys, clears, sets, 0, keys.size)
        assert status == ops.OK
        if table._st.meta[M_ALLW]:
            return  # a locator rebuild: the header path, not the kernel's
        want, buckets, words = naive.ludo_dirty_images(table)
        got = table._emit(full=False)
        if not buckets and not words:
            assert len(got) == 0
            continue
        for name in (
            "bucket_ids",
            "bucket_seeds",
            "bucket_values",
            "bucket_fps",
            "word_ids",
            "words",
        ):
            a, b = getattr(got, name), getattr(want, name)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            np.testing.assert_array_equal(a, b)
        assert not got.header and not got.commit
        st_ = table._st
        assert st_.meta[M_NB] == 0 and st_.meta[M_NW] == 0
        assert not st_.bdirty[buckets].any() and not st_.wdirty[words].any()
