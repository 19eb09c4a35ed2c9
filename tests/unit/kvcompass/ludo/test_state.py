"""The one-buffer table state: ``unpack(mem)`` inside a kernel sees exactly the Python views."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.ludo import LudoParams
from kvcompass.ludo.jit import inlined, kernel
from kvcompass.ludo.state import FIELDS, TableState, allocate_state, unpack


@inlined
def _touch(a: Any, out: Any, i: int) -> None:
    out[i] = a.shape[0]
    if a.shape[0]:
        a[a.shape[0] - 1] = 7


@kernel
def _stamp_every_field(mem: Any, out: Any) -> None:
    """Write 7 into the last element of several fields through ``unpack``; report each length."""
    s = unpack(mem)
    _touch(s.params, out, 0)
    _touch(s.seeds, out, 1)
    _touch(s.values, out, 2)
    _touch(s.fps, out, 3)
    _touch(s.locator, out, 4)
    _touch(s.skeys, out, 5)
    _touch(s.sentry, out, 6)
    _touch(s.half, out, 7)
    _touch(s.head, out, 8)
    out[9] = s.bfull.shape[0]
    out[10] = s.meta.shape[0]
    s.meta[s.meta.shape[0] - 1] = -7
    s.bfull[0] = 7


def _state(capacity: int, value_bits: int, fp_bits: int) -> TableState:
    p = LudoParams.for_capacity(
        capacity, value_bits=value_bits, fp_bits=fp_bits, rng=np.random.default_rng(capacity)
    )
    return allocate_state(p, capacity, 1)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5000), st.sampled_from([32, 64]), st.sampled_from([0, 8, 16]))
def test_unpack__sees_the_same_memory_as_the_python_views(
    capacity: int, value_bits: int, fp_bits: int
) -> None:
    s = _state(capacity, value_bits, fp_bits)
    out = np.zeros(11, np.int64)
    _stamp_every_field(s.mem, out)
    named = (s.params, s.seeds, s.values, s.fps, s.locator, s.skeys, s.sentry, s.half, s.head)
    assert out[:9].tolist() == [a.shape[0] for a in named]
    assert (out[9], out[10]) == (s.bfull.shape[0], s.meta.shape[0])
    for a in named:
        if a.shape[0]:
            assert int(a[-1]) == 7
    assert int(s.meta[-1]) == -7 and int(s.bfull[0]) == 7


def test_allocate_state__fields_are_cache_line_aligned_views_of_mem() -> None:
    s = _state(1000, 32, 8)
    base = s.mem.ctypes.data
    end = base + s.mem.nbytes
    for name in FIELDS:
        a = getattr(s, name)
        assert a.flags.c_contiguous, name
        assert a.ctypes.data % 64 == 0, name
        assert base <= a.ctypes.data and a.ctypes.data + a.nbytes <= end, name
        assert np.shares_memory(a, s.mem), name
