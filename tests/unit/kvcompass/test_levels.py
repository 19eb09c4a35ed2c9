"""Latency-derived levels: the paper's testbed numbers and properties over random deployments."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.deployment import Deployment, Region, builtin_deployment
from kvcompass.errors import InvalidInputError
from kvcompass.levels import Levels, first_level_tokens

TESTBED = Levels.from_deployment(builtin_deployment("paper-testbed-14x3"))


def _naive_pair(rtt: float, beta: float, block: int, n_levels: int) -> list[int]:
    """Fractions, no shortcuts: n1 = ceil(RTT/β) up to a block, then n1 + k·n1/2 up to a block."""
    exact = Fraction(str(round(rtt / beta, 9)))
    n1 = max(block, math.ceil(math.ceil(exact) / block) * block)
    return [
        math.ceil(math.ceil(Fraction(n1 * (2 + k), 2)) / block) * block for k in range(n_levels)
    ]


def test_testbed_n1__matches_hand_computation() -> None:
    # US-EU: RTT 320 ms / 0.085 = 3764.7 -> 3765 -> 3776 (next multiple of 16)
    assert TESTBED.n1(0, 1) == 3776
    # US-Asia: 252 / 0.085 = 2964.7 -> 2976; EU-Asia: 298 / 0.085 = 3505.9 -> 3520
    assert TESTBED.n1(0, 2) == 2976
    assert TESTBED.n1(1, 2) == 3520
    assert TESTBED.n1(1, 0) == 3776


def test_testbed_cross_levels__steps_of_half_n1() -> None:
    assert TESTBED.for_pair(0, 1).tolist() == [3776, 5664, 7552, 9440, 11328, 13216]
    # n1 = 2976 = 186 blocks; 1.5 n1 = 4464 is a multiple of 16, so no rounding here either
    assert TESTBED.for_pair(2, 0).tolist() == [2976, 4464, 5952, 7440, 8928, 10416]


def test_same_region__doubles_from_the_minimum() -> None:
    for r in range(3):
        assert TESTBED.for_pair(r, r).tolist() == [128, 256, 512, 1024, 2048, 4096]
        assert TESTBED.n1(r, r) == 128


def test_registration__sorted_unique_union_of_every_pair() -> None:
    for r in range(TESTBED.n_regions):
        reg = TESTBED.registration_lengths(r)
        assert np.all(np.diff(reg) > 0)
        expected = set()
        for o in range(TESTBED.n_regions):
            expected |= set(TESTBED.for_pair(o, r).tolist())
        assert set(reg.tolist()) == expected
    assert TESTBED.max_registration_length == 13216


def test_query_lengths__every_pair_level_once__sorted() -> None:
    lengths, regions = TESTBED.query_lengths(1)
    assert lengths.shape == regions.shape == (18,)
    assert np.all(np.diff(lengths) >= 0)
    for r in range(3):
        assert lengths[regions == r].tolist() == TESTBED.for_pair(1, r).tolist()
    assert TESTBED.query_union(1).tolist() == sorted(set(lengths.tolist()))


def test_arrays__read_only() -> None:
    with pytest.raises(ValueError):
        TESTBED.matrix[0, 0, 0] = 1
    with pytest.raises(ValueError):
        TESTBED.registration_lengths(0)[0] = 1


def test_bad_region_index__invalid_input() -> None:
    with pytest.raises(InvalidInputError, match=r"expected a region index in \[0, 3\)"):
        TESTBED.for_pair(0, 3)


def test_first_level__float_noise_does_not_add_a_block() -> None:
    # 0.3 / 0.1 is 2.9999999999999996 in floats, 1.6 / 0.1 is 16.000000000000004
    assert first_level_tokens(1.6, 0.1, 16) == 16
    assert first_level_tokens(0.0, 0.1, 16) == 16


@st.composite
def deployments(draw: st.DrawFn) -> Deployment:
    n = draw(st.integers(1, 6))
    regions = tuple(
        Region(f"r{i}", draw(st.integers(1, 4)), draw(st.floats(0.01, 1.0))) for i in range(n)
    )
    m = [[0.0] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            m[i][j] = m[j][i] = draw(st.floats(0.0, 300.0))
    return Deployment(
        "h",
        regions,
        tuple(tuple(row) for row in m),
        block_size_tokens=draw(st.sampled_from([1, 8, 16, 32, 64])),
        n_levels=draw(st.integers(1, 8)),
        same_region_min_tokens=draw(st.integers(1, 512)),
    )


@settings(max_examples=150, deadline=None)
@given(deployments())
def test_levels__properties_hold__random_deployments(dep: Deployment) -> None:
    lv = Levels.from_deployment(dep)
    b, big_l, n = dep.block_size_tokens, dep.n_levels, dep.n_regions
    assert lv.matrix.shape == (n, n, big_l)
    assert np.all(lv.matrix % b == 0) and np.all(lv.matrix >= b)
    assert np.all(np.diff(lv.matrix, axis=2) >= 0)
    for o in range(n):
        for r in range(n):
            got = lv.for_pair(o, r).tolist()
            if o == r:
                m = dep.same_region_min_tokens
                assert got == [math.ceil(m * 2**k / b) * b for k in range(big_l)]
            else:
                beta = dep.regions[r].prefill_ms_per_token
                assert got == _naive_pair(dep.rtt_ms(o, r), beta, b, big_l)
                # n1's saved prefill pays for the round trip; one block less would not
                assert got[0] * beta >= dep.rtt_ms(o, r) - 1e-6
                if got[0] > b:
                    assert (got[0] - b) * beta < dep.rtt_ms(o, r)
        union = lv.registration_lengths(o)
        assert np.all(np.diff(union) > 0)
        for other in range(n):
            assert np.isin(lv.for_pair(other, o), union).all()


@settings(max_examples=150, deadline=None)
@given(st.floats(0.0, 500.0), st.floats(0.0, 500.0), st.floats(0.01, 1.0), st.sampled_from([1, 16]))
def test_n1__monotone_in_rtt(rtt_a: float, rtt_b: float, beta: float, block: int) -> None:
    lo, hi = sorted((rtt_a, rtt_b))
    assert first_level_tokens(lo, beta, block) <= first_level_tokens(hi, beta, block)
