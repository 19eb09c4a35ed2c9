"""LudoView and the view kernels: lookup equals the pure-Python twin, apply, validation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import LudoParams, LudoTable, LudoView, PatchBatch, ViewArrays
from kvcompass.ludo.kernels import lookup_key
from tests import naive


def _random_view(seed: int, capacity: int, value_bits: int, fp_bits: int) -> LudoView:
    rng = np.random.default_rng(seed)
    p = LudoParams.for_capacity(capacity, value_bits=value_bits, fp_bits=fp_bits, rng=rng)
    a = ViewArrays.allocate(p)
    a.seeds[:] = rng.integers(0, 255, a.seeds.shape[0], np.uint8)
    a.values[:] = rng.integers(0, 2**32, a.values.shape[0], np.uint32)
    # small fingerprint alphabet so matches (and mismatches) both happen
    a.fps[:] = rng.integers(0, 2, a.fps.shape[0], np.uint8)
    a.locator[:] = rng.integers(0, 2**64 - 1, a.locator.shape[0], np.uint64, endpoint=True)
    return LudoView(p, a)


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    capacity=st.integers(1, 3000),
    value_bits=st.sampled_from([32, 64]),
    fp_bits=st.sampled_from([0, 8, 16]),
    keys=st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=50),
)
def test_lookup__equals_naive_twin__random_arrays(
    seed: int, capacity: int, value_bits: int, fp_bits: int, keys: list[int]
) -> None:
    v = _random_view(seed, capacity, value_bits, fp_bits)
    got = v.lookup(np.array(keys, np.uint64)).tolist()
    assert got == [naive.naive_lookup(v.params, v.arrays, k) for k in keys]
    assert [v.lookup_one(k) for k in keys] == got


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    capacity=st.integers(1, 2000),
    value_bits=st.sampled_from([32, 64]),
    fp_bits=st.sampled_from([0, 8, 16]),
    frac=st.floats(0.0, 1.0),
)
def test_apply__equals_naive_twin__random_batches(
    seed: int, capacity: int, value_bits: int, fp_bits: int, frac: float
) -> None:
    v = _random_view(seed, capacity, value_bits, fp_bits)
    p = v.params
    rng = np.random.default_rng(seed + 1)
    nb = int(frac * p.n_buckets)
    nw = int(frac * p.n_locator_words)
    batch = PatchBatch(
        params=p,
        header=False,
        bucket_ids=np.sort(rng.choice(p.n_buckets, nb, replace=False)).astype(np.int64),
        bucket_seeds=rng.integers(0, 255, nb, np.uint8),
        bucket_values=rng.integers(0, 2**value_bits - 1, (nb, 4), np.uint64, endpoint=True),
        bucket_fps=rng.integers(0, 2**fp_bits if fp_bits else 1, (nb, 4), np.uint16),
        word_ids=np.sort(rng.choice(p.n_locator_words, nw, replace=False)).astype(np.int64),
        words=rng.integers(0, 2**64 - 1, nw, np.uint64, endpoint=True),
        commit=False,
    )
    a = v.arrays
    expect = ViewArrays(a.seeds.copy(), a.values.copy(), a.fps.copy(), a.locator.copy())
    naive.naive_apply(p, expect, batch)
    v.apply(batch)
    for name in ("seeds", "values", "fps", "locator"):
        assert np.array_equal(getattr(v.arrays, name), getattr(expect, name)), name


@njit  # no cache: test modules are imported by path (importlib mode)
def _sum_lookups(params_arr, seeds, values, fps, locator, keys):  # type: ignore[no-untyped-def]
    total = np.uint64(0)
    for i in range(keys.shape[0]):
        total += lookup_key(params_arr, seeds, values, fps, locator, keys[i])
    return total


def test_lookup_key__inlines_into_other_kernels() -> None:
    v = _random_view(1, 500, 32, 8)
    keys = np.arange(100, dtype=np.uint64)
    a = v.arrays
    got = _sum_lookups(v.params.to_array(), a.seeds, a.values, a.fps, a.locator, keys)
    assert int(got) == int(v.lookup(keys).sum())


def test_empty_view__returns_no_holder() -> None:
    v = LudoView.empty(LudoParams.for_capacity(100, rng=np.random.default_rng(0)))
    assert v.lookup(np.arange(50, dtype=np.uint64)).tolist() == [0] * 50
    assert not v.committed


def test_apply__full_image_reproduces_table_arrays() -> None:
    t = LudoTable(300, value_bits=64, fp_bits=16, seed=1)
    keys = np.arange(1, 250, dtype=np.uint64)
    t.update(keys, np.zeros(249, np.uint64), keys << np.uint64(33))
    v = LudoView.empty(t.params)
    v.apply(t.full_image())
    for name in ("seeds", "values", "fps", "locator"):
        assert np.array_equal(getattr(v.arrays, name), getattr(t.view_arrays(), name))
    assert v.committed
    assert v.lookup(keys).tolist() == (keys << np.uint64(33)).tolist()


def test_apply__other_epoch_raises() -> None:
    t = LudoTable(10, seed=1)
    p = t.params
    other = LudoParams(**{**{f: getattr(p, f) for f in p.__dataclass_fields__}, "epoch": 1})
    with pytest.raises(InvalidInputError, match="epoch"):
        LudoView.empty(other).apply(t.full_image())


def test_apply__other_sizes_same_epoch_raises() -> None:
    a = LudoTable(10, seed=1)
    b = LudoTable(1000, seed=1)
    with pytest.raises(InvalidInputError, match="sizes"):
        LudoView.empty(a.params).apply(b.full_image())


def test_apply__bucket_id_out_of_range_raises() -> None:
    t = LudoTable(10, seed=1)
    p = t.params
    bad = PatchBatch.empty(p)
    bad = PatchBatch(
        params=p,
        header=False,
        bucket_ids=np.array([p.n_buckets], np.int64),
        bucket_seeds=np.zeros(1, np.uint8),
        bucket_values=np.zeros((1, 4), np.uint64),
        bucket_fps=np.zeros((1, 4), np.uint16),
        word_ids=bad.word_ids,
        words=bad.words,
        commit=False,
    )
    with pytest.raises(InvalidInputError, match="bucket_ids"):
        LudoView.empty(p).apply(bad)


def test_apply__wrong_dtype_raises() -> None:
    t = LudoTable(10, seed=1)
    b = t.full_image()
    bad = PatchBatch(
        params=b.params,
        header=True,
        bucket_ids=b.bucket_ids,
        bucket_seeds=b.bucket_seeds,
        bucket_values=b.bucket_values.astype(np.int64),
        bucket_fps=b.bucket_fps,
        word_ids=b.word_ids,
        words=b.words,
        commit=True,
    )
    with pytest.raises(InvalidInputError, match="bucket_values"):
        LudoView.empty(t.params).apply(bad)


def test_view__wrong_array_shape_raises() -> None:
    p = LudoParams.for_capacity(100, rng=np.random.default_rng(0))
    a = ViewArrays.allocate(p)
    a.locator = np.zeros(a.locator.shape[0] + 1, np.uint64)
    with pytest.raises(InvalidInputError, match="locator"):
        LudoView(p, a)


@pytest.mark.parametrize(
    "keys", [np.array([1, 2], np.int64), np.array([[1]], np.uint64), np.array([2**63], np.uint64)]
)
def test_lookup__invalid_keys_raise(keys: np.ndarray) -> None:
    v = LudoView.empty(LudoParams.for_capacity(10, rng=np.random.default_rng(0)))
    with pytest.raises(InvalidInputError, match="key"):
        v.lookup(keys)


@pytest.mark.parametrize("key", [-1, 2**63])
def test_lookup_one__out_of_range_raises(key: int) -> None:
    v = LudoView.empty(LudoParams.for_capacity(10, rng=np.random.default_rng(0)))
    with pytest.raises(InvalidInputError, match="key"):
        v.lookup_one(key)


def test_apply__read_only_arrays_raise() -> None:
    t = LudoTable(10, seed=1)
    a = ViewArrays.allocate(t.params)
    for x in (a.seeds, a.values, a.fps, a.locator):
        x.flags.writeable = False
    v = LudoView(t.params, a)
    assert v.lookup(np.arange(5, dtype=np.uint64)).tolist() == [0] * 5
    with pytest.raises(InvalidInputError, match="writable"):
        v.apply(t.full_image())
