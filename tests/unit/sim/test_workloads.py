"""The Workload value object and the block -> token kernel (workload.py, tokens.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.keys import KeyNamespace, PrefixHasher
from sim.workloads.sampling import concat_ranges
from sim.workloads.tokens import TOKEN_SEED, VOCAB_SIZE, expand_blocks
from sim.workloads.workload import Kind, Workload
from tests.naive import concat_ranges_naive, expand_blocks_naive


def _workload(rows: list[list[int]], lens: list[int], bt: int = 4) -> Workload:
    n = len(rows)
    offsets = np.zeros(n + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    return Workload(
        name="t",
        block_tokens=bt,
        arrival_ms=np.arange(n, dtype=np.float64),
        origin_region=np.zeros(n, dtype=np.int64),
        prompt_len=np.asarray(lens, dtype=np.int64),
        output_len=np.ones(n, dtype=np.int64),
        block_ids=np.asarray([b for r in rows for b in r], dtype=np.int64),
        block_offsets=offsets,
        tenant=np.full(n, -1, dtype=np.int32),
        kind=np.full(n, Kind.CHAT_FIRST, dtype=np.int8),
    )


@st.composite
def _prompts(draw: st.DrawFn) -> tuple[list[list[int]], list[int], int]:
    bt = draw(st.integers(1, 9))
    n = draw(st.integers(0, 5))
    lens = draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    rows = [
        draw(st.lists(st.integers(0, 2**63 - 1), min_size=-(-L // bt), max_size=-(-L // bt)))
        for L in lens
    ]
    return rows, lens, bt


@settings(max_examples=150, deadline=None)
@given(_prompts(), st.integers(0, 2**64 - 1))
def test_expand_blocks__equals_naive_twin(
    case: tuple[list[list[int]], list[int], int], seed: int
) -> None:
    rows, lens, bt = case
    w = _workload(rows, lens, bt)
    tokens, offsets = expand_blocks(w.block_ids, w.block_offsets, w.prompt_len, bt, seed)
    assert offsets.tolist() == [0, *np.cumsum(lens).tolist()]
    for i, (row, length) in enumerate(zip(rows, lens, strict=True)):
        got = tokens[offsets[i] : offsets[i + 1]].tolist()
        assert got == expand_blocks_naive(row, length, bt, seed)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 6).flatmap(
        lambda n: st.tuples(
            st.lists(
                st.lists(st.integers(0, 10**12), min_size=3, max_size=3), min_size=n, max_size=n
            ),
            st.lists(st.lists(st.integers(0, 7), min_size=3, max_size=3), min_size=n, max_size=n),
        )
    )
)
def test_concat_ranges__equals_naive_twin(case: tuple[list[list[int]], list[list[int]]]) -> None:
    starts, counts = case
    s = np.array(starts, dtype=np.int64).reshape(-1, 3)
    c = np.array(counts, dtype=np.int64).reshape(-1, 3)
    values, offsets = concat_ranges(s, c)
    rows = [values[offsets[i] : offsets[i + 1]].tolist() for i in range(len(starts))]
    assert rows == concat_ranges_naive(starts, counts)
    assert int(offsets[-1]) == values.shape[0]


def test_concat_ranges__rejects_negative_counts_and_shape_mismatch() -> None:
    with pytest.raises(InvalidInputError, match="counts: expected >= 0"):
        concat_ranges(np.zeros((1, 2), dtype=np.int64), np.array([[1, -1]]))
    with pytest.raises(InvalidInputError, match="equal"):
        concat_ranges(np.zeros((1, 2), dtype=np.int64), np.zeros((2, 2), dtype=np.int64))


def test_tokens__in_vocabulary_and_int32__for_many_blocks() -> None:
    w = _workload([list(range(1000))], [4000], bt=4)
    t = w.tokens_of(0)
    assert t.dtype == np.int32 and t.shape == (4000,)
    assert int(t.min()) >= 0 and int(t.max()) < VOCAB_SIZE
    # A decent mix: most of the vocabulary ranges are hit, few repeats within one block.
    assert len(np.unique(t)) > 3900


def test_tokens_of__equal_block_prefix_gives_equal_token_prefix() -> None:
    w = _workload([[7, 8, 9], [7, 8, 5], [6, 8, 9]], [12, 10, 12], bt=4)
    a, b, c = (w.tokens_of(i) for i in range(3))
    assert np.array_equal(a[:8], b[:8]) and not np.array_equal(a[8:10], b[8:10])
    assert not np.array_equal(a[:4], c[:4])
    assert np.array_equal(a[4:], c[4:])  # same block ids, same tokens, whatever the position


def test_tokens_of__last_block_truncated_to_prompt_len() -> None:
    w = _workload([[3, 4], [3, 4]], [5, 8], bt=4)
    assert w.tokens_of(0).shape == (5,)
    assert np.array_equal(w.tokens_of(0), w.tokens_of(1)[:5])


def test_tokens_batch__matches_tokens_of_and_feeds_prefix_hasher() -> None:
    w = _workload([[1, 2], [1, 3, 4], [5]], [8, 9, 2], bt=4)
    flat, offs = w.tokens_batch(1, 3)
    assert offs.tolist() == [0, 9, 11]
    assert np.array_equal(flat[:9], w.tokens_of(1)) and np.array_equal(flat[9:], w.tokens_of(2))
    hasher = PrefixHasher(KeyNamespace("llama-3.1-8b"))
    keys, key_offs = hasher.keys_at_batch(flat, offs, np.array([4, 8], dtype=np.int64))
    assert key_offs.tolist() == [0, 2, 2]
    full, _ = w.tokens_batch(0, 3)
    keys0, _ = hasher.keys_at_batch(full[:8], np.array([0, 8]), np.array([4], dtype=np.int64))
    assert int(keys[0]) == int(keys0[0])  # requests 0 and 1 share block 1 -> same 4-token key


def test_slice__rebases_offsets_and_keeps_tokens() -> None:
    w = _workload([[1, 2], [3], [4, 5, 6]], [8, 3, 10], bt=4)
    s = w.slice(1, 3)
    assert len(s) == 2 and s.block_offsets.tolist() == [0, 1, 4]
    assert np.array_equal(s.tokens_of(1), w.tokens_of(2))
    assert len(w.slice(2, 1)) == 0 and len(w.slice(-1, 10)) == 1


def test_workload__rejects_block_count_mismatch() -> None:
    with pytest.raises(InvalidInputError, match=r"request 0 needs ceil\(9/4\) = 3 blocks, got 2"):
        _workload([[1, 2]], [9], bt=4)


def test_workload__rejects_decreasing_arrivals_and_bad_dtypes() -> None:
    w = _workload([[1], [2]], [3, 3], bt=4)
    with pytest.raises(InvalidInputError, match="non-decreasing"):
        Workload(**{**_fields(w), "arrival_ms": np.array([5.0, 1.0])})
    with pytest.raises(InvalidInputError, match="tenant: expected int32"):
        Workload(**{**_fields(w), "tenant": np.array([0, 0], dtype=np.int64)})


def test_tokens_batch__rejects_out_of_range_bounds() -> None:
    w = _workload([[1]], [3], bt=4)
    with pytest.raises(InvalidInputError, match="0 <= start <= stop <= 1"):
        w.tokens_batch(0, 2)
    with pytest.raises(InvalidInputError, match="0 <= i < 1"):
        w.tokens_of(1)


def test_expand_blocks__rejects_wrong_block_count_and_bad_seed() -> None:
    ids, offs, lens = np.array([1, 2]), np.array([0, 2]), np.array([9])
    with pytest.raises(InvalidInputError, match="needs ceil"):
        expand_blocks(ids, offs, lens, 4)
    with pytest.raises(InvalidInputError, match="seed"):
        expand_blocks(ids, offs, np.array([8]), 4, seed=-1)
    with pytest.raises(InvalidInputError, match="block_ids: expected a 1-D integer"):
        expand_blocks(np.array([1.0, 2.0]), offs, np.array([8]), 4)
    assert expand_blocks(ids, offs, np.array([8]), 4, TOKEN_SEED)[0].shape == (8,)


def _fields(w: Workload) -> dict[str, object]:
    return {f: getattr(w, f) for f in Workload.__dataclass_fields__}
