"""``kvcompass.mix`` and ``kvcompass.ring`` against their plain-Python twins, and the rule."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.mix import finalize, splitmix64, splitmix64_array
from kvcompass.ring import HashRing, LevelRings, ladder, place
from tests import naive

u64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=200, deadline=None)
@given(u64, u64)
def test_mix64__equals_splitmix64_first_output(x: int, seed: int) -> None:
    want = naive.splitmix64_mix((x ^ seed) + 0x9E3779B97F4A7C15)
    assert splitmix64(x, seed) == want
    assert int(finalize(np.uint64(x))) == naive.splitmix64_mix(x)
    assert int(splitmix64_array(np.array([x], np.uint64), seed)[0]) == want


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 12), st.integers(1, 8), u64, st.lists(u64, min_size=1, max_size=20))
def test_ring_owner__equals_twin(n: int, v: int, seed: int, keys: list[int]) -> None:
    ring = HashRing(n, v, seed)
    want = [naive.ring_owner_naive(n, v, seed, k) for k in keys]
    assert [ring.owner(k) for k in keys] == want
    assert ring.owners(np.array(keys, np.uint64)).tolist() == want


def test_level_rings__independent_and_balanced() -> None:
    rings = LevelRings(16, 6)
    keys = np.arange(20000, dtype=np.uint64)
    a, b = rings.rings[0].owners(keys), rings.rings[1].owners(keys)
    assert float(np.mean(a == b)) < 0.15  # independent: agree about 1/16 of the time
    share = np.bincount(a, minlength=16) / keys.shape[0]
    assert share.min() > 0.6 / 16 and share.max() < 1.6 / 16


def test_ladder__on_the_block_grid_whatever_the_block() -> None:
    assert ladder(128, 6, 16) == [128, 256, 512, 1024, 2048, 4096]
    assert ladder(128, 6, 512) == [512, 1024, 2048, 4096, 8192, 16384]
    with pytest.raises(InvalidInputError):
        ladder(0, 6, 16)


def test_place__deepest_held_level_else_the_deepest_levels_owner() -> None:
    assert place([3, 5, 7], [True, True, False]) == (5, 1)
    assert place([3, 5, 7], [False, False, False]) == (7, -1)
    with pytest.raises(InvalidInputError):
        place([], [])
