"""Prefix keys: bit-identical to mmh3 on every prefix, one namespace never collides with another."""

from __future__ import annotations

import struct

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from kvcompass.errors import InvalidInputError
from kvcompass.keys import (
    KEY_MASK,
    KeyNamespace,
    PrefixHasher,
    _first_bad_length,
    _first_negative,
    prompt_key,
)
from tests.naive import first_bad_length, first_negative, keys_at_bytes, keys_at_mmh3_hasher

NS = KeyNamespace("meta-llama/Llama-3.1-8B-Instruct", "bf16;tp=1")

tokens_st = hnp.arrays(np.int32, st.integers(1, 300), elements=st.integers(0, 2**31 - 1))


@st.composite
def tokens_and_lengths(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    toks = draw(tokens_st)
    lens = draw(st.lists(st.integers(1, toks.shape[0]), min_size=0, max_size=20))
    return toks, np.array(sorted(lens), dtype=np.int64)


namespace_st = st.builds(
    KeyNamespace,
    st.text(min_size=1, max_size=40),
    st.text(max_size=40),
    st.none() | st.text(max_size=20),
)


def test_header_bytes__layout_is_the_documented_one() -> None:
    ns = KeyNamespace("m", "bf16", "t")
    expected = b"KVCK" + struct.pack("<BBH", 1, 1, 0)
    expected += struct.pack("<I", 1) + b"m" + struct.pack("<I", 4) + b"bf16"
    expected += struct.pack("<I", 1) + b"t"
    expected += bytes(-len(expected) % 16)
    assert ns.header_bytes() == expected
    assert len(expected) % 16 == 0


def test_key__equals_low_63_bits_of_h1_of_mmh3_hash128() -> None:
    ns = KeyNamespace("m")
    toks = np.array([1, 2, 3, 4, 5, 70000], dtype=np.int32)
    data = ns.header_bytes() + b"".join(struct.pack("<i", int(t)) for t in toks)
    h1 = int.from_bytes(mmh3.hash_bytes(data, 0)[:8], "little")
    assert prompt_key(ns, toks, 6) == h1 & KEY_MASK
    assert int(PrefixHasher(ns).keys_at(toks, np.array([6]))[0]) == h1 & KEY_MASK


@settings(max_examples=150, deadline=None)
@given(namespace_st, tokens_and_lengths())
def test_keys_at__bit_identical_to_mmh3_twins__any_cuts(
    ns: KeyNamespace, tl: tuple[np.ndarray, np.ndarray]
) -> None:
    toks, lens = tl
    got = PrefixHasher(ns).keys_at(toks, lens)
    assert got.dtype == np.uint64
    assert got.tolist() == keys_at_bytes(ns, toks, lens)
    assert got.tolist() == keys_at_mmh3_hasher(ns, toks, lens)
    assert all(k <= KEY_MASK for k in got.tolist())


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 70), min_size=1, max_size=12),
    st.lists(st.integers(1, 80), min_size=0, max_size=10),
    st.integers(0, 2**32 - 1),
)
def test_keys_at_batch__equals_per_prompt_keys_at(
    sizes: list[int], lens: list[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = rng.integers(0, 2**31 - 1, size=int(offsets[-1]), dtype=np.int32)
    lengths = np.array(sorted(lens), dtype=np.int64)
    h = PrefixHasher(NS)
    keys, key_offsets = h.keys_at_batch(flat, offsets, lengths)
    assert key_offsets.shape == (len(sizes) + 1,)
    assert key_offsets[0] == 0 and key_offsets[-1] == keys.shape[0]
    for i, n in enumerate(sizes):
        fit = lengths[lengths <= n]
        prompt = flat[offsets[i] : offsets[i + 1]]
        expected = keys_at_bytes(NS, prompt, fit)
        assert keys[key_offsets[i] : key_offsets[i + 1]].tolist() == expected


def test_keys__differ_across_namespaces__same_tokens() -> None:
    spaces = [
        KeyNamespace("a"),
        KeyNamespace("b"),
        KeyNamespace("a", "bf16"),
        KeyNamespace("a", "", ""),
        KeyNamespace("a", "", "tenant-1"),
        KeyNamespace("a", "", "tenant-2"),
        KeyNamespace("ab"),
        KeyNamespace("a", "b"),
    ]
    toks = np.arange(1, 257, dtype=np.int32)
    lens = np.arange(1, 257, dtype=np.int64)
    all_keys = [PrefixHasher(ns).keys_at(toks, lens) for ns in spaces]
    flat = np.concatenate(all_keys)
    assert np.unique(flat).shape[0] == flat.shape[0]


def test_keys_at__accepts_int64_tokens_in_range__same_keys_as_int32() -> None:
    toks = np.array([0, 5, 2**31 - 1, 9, 12], dtype=np.int64)
    h = PrefixHasher(NS)
    assert (
        h.keys_at(toks, np.array([1, 5])).tolist()
        == h.keys_at(toks.astype(np.int32), np.array([1, 5])).tolist()
    )
    assert h.keys_at(list(toks), [5]).tolist() == keys_at_bytes(NS, toks, [5])


def test_keys_at__empty_lengths__empty_keys() -> None:
    got = PrefixHasher(NS).keys_at(np.arange(4, dtype=np.int32), np.zeros(0, dtype=np.int64))
    assert got.shape == (0,) and got.dtype == np.uint64


@pytest.mark.parametrize(
    ("tokens", "lengths", "fragment"),
    [
        (np.array([1.0, 2.0]), [1], "integer"),
        (np.array([1, -2, 3], dtype=np.int32), [1], "non-negative"),
        (np.array([1, 2**31], dtype=np.int64), [1], "token ids in"),
        (np.zeros((2, 2), dtype=np.int32), [1], "1-D"),
        (np.arange(8, dtype=np.int32), [4, 2], "ascending"),
        (np.arange(8, dtype=np.int32), [0], "ascending"),
        (np.arange(8, dtype=np.int32), [9], "8"),
        (np.arange(8, dtype=np.int32), np.array([1.5]), "integer"),
    ],
)
def test_keys_at__rejects_bad_input__with_expected_and_got(
    tokens: object, lengths: object, fragment: str
) -> None:
    with pytest.raises(InvalidInputError, match="expected") as info:
        PrefixHasher(NS).keys_at(tokens, lengths)  # type: ignore[arg-type]
    assert fragment in str(info.value)


def test_keys_at_batch__rejects_offsets_not_covering_tokens() -> None:
    h = PrefixHasher(NS)
    toks = np.arange(10, dtype=np.int32)
    with pytest.raises(InvalidInputError, match="offsets"):
        h.keys_at_batch(toks, np.array([0, 4]), np.array([1]))
    with pytest.raises(InvalidInputError, match="non-decreasing"):
        h.keys_at_batch(toks, np.array([0, 6, 4, 10]), np.array([1]))
    with pytest.raises(InvalidInputError, match="offsets"):
        h.keys_at_batch(toks, np.zeros(0, dtype=np.int64), np.array([1]))


def test_prompt_key__rejects_length_out_of_range() -> None:
    with pytest.raises(InvalidInputError, match="length"):
        prompt_key(NS, np.arange(3, dtype=np.int32), 4)


@pytest.mark.parametrize("bad", [("",), ("m", 3), ("m", "", 7), ("\ud800",)])
def test_namespace__rejects_bad_fields(bad: tuple[object, ...]) -> None:
    with pytest.raises(InvalidInputError, match="expected"):
        KeyNamespace(*bad)  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(np.int32, st.integers(0, 64), elements=st.integers(-3, 3)),
    hnp.arrays(np.int64, st.integers(0, 12), elements=st.integers(-2, 40)),
    st.integers(0, 40),
)
def test_validation_kernels__equal_naive_twins(
    toks: np.ndarray, lens: np.ndarray, max_len: int
) -> None:
    assert _first_negative(toks) == first_negative(toks)
    assert _first_bad_length(lens, max_len) == first_bad_length(lens, max_len)
