"""The numba hash kernels equal their plain-Python twins in ``tests/naive.py``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.ludo import hashing
from tests import naive

keys63 = st.integers(0, (1 << 63) - 1)
seeds64 = st.integers(0, (1 << 64) - 1)
sizes = st.integers(1, (1 << 29) - 1)


@settings(max_examples=200, deadline=None)
@given(keys63, seeds64)
def test_mix64__equals_twin(key: int, seed: int) -> None:
    assert int(hashing.mix64(np.uint64(key), np.uint64(seed))) == naive.ludo_mix64(key, seed)


@settings(max_examples=200, deadline=None)
@given(keys63, seeds64, sizes)
def test_bucket_pair__equals_twin_and_in_range(key: int, seed: int, n: int) -> None:
    got = hashing.bucket_pair(np.uint64(key), np.uint64(seed), np.uint64(n))
    assert tuple(int(x) for x in got) == naive.ludo_bucket_pair(key, seed, n)
    assert all(0 <= int(x) < n for x in got)


@settings(max_examples=200, deadline=None)
@given(keys63, seeds64, sizes, sizes)
def test_locator_cells__equal_twin_and_split_arrays(key: int, seed: int, ma: int, mb: int) -> None:
    a, b = hashing.locator_cells(np.uint64(key), np.uint64(seed), np.uint64(ma), np.uint64(mb))
    assert (int(a), int(b)) == naive.ludo_locator_cells(key, seed, ma, mb)
    assert 0 <= int(a) < ma <= int(b) < ma + mb


@settings(max_examples=200, deadline=None)
@given(keys63, seeds64, st.integers(0, 255))
def test_slot_of__equals_twin(key: int, seed: int, seed8: int) -> None:
    got = int(hashing.slot_of(np.uint64(key), np.uint64(seed), np.uint64(seed8)))
    assert got == naive.ludo_slot_of(key, seed, seed8)
    assert 0 <= got < 4


@settings(max_examples=200, deadline=None)
@given(keys63, seeds64, st.sampled_from([0, 8, 16]))
def test_fingerprint__equals_twin_and_fits(key: int, seed: int, bits: int) -> None:
    got = int(hashing.fingerprint(np.uint64(key), np.uint64(seed), np.uint64(bits)))
    assert got == naive.ludo_fingerprint(key, seed, bits)
    assert got < (1 << bits)


def test_slot_of__spreads_sequential_keys_evenly() -> None:
    counts = np.bincount([naive.ludo_slot_of(k, 12345, 7) for k in range(4000)], minlength=4)
    assert counts.min() > 850  # 1000 expected per slot
