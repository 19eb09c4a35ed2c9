"""Deterministic pseudo-tokens of content blocks: the only place prompts become token ids.

Owns the mapping (block id X, position j in the block) -> token id. Workloads store prompts as
sequences of block ids; the simulator materialises tokens only when it needs index keys, in
chunks, through :func:`expand_blocks` (one numba call per chunk). Must not hold random state: the
mapping is a pure function of ``(X, j, seed)``.

Mapping (the "wire format" of a synthetic prompt)::

    s      = finalize(uint64(X) XOR seed)                  # one stream per block id
    tok(j) = finalize(s + (j + 1) * 0x9E3779B97F4A7C15) mod VOCAB_SIZE   (j = 0 .. block_tokens-1)

``finalize`` is the SplitMix64 finaliser (``kvcompass.mix.finalize``: Steele, Lea, Flood 2014;
the constants of Java's ``SplittableRandom``), so ``tok`` is the j-th SplitMix64 output of a
generator seeded by the block. ``VOCAB_SIZE = 128256`` is the Llama-3 / Llama-3.1 tokenizer
vocabulary (the paper serves Llama-3.1-8B-Instruct), so token ids lie in ``[0, 128256)`` and
fit a non-negative ``int32``. The modulo bias (2^64 mod 128256 is negligible against 2^64)
does not matter here.

Consequences the simulator relies on: equal block-id prefixes give equal token prefixes (prefix
sharing is exact); different block ids agree on a position with probability 1/128256, so two
different blocks share a run of r leading tokens with probability about 128256^-r.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.mix import GOLDEN, finalize

VOCAB_SIZE = 128256
"""Llama-3 tokenizer vocabulary size; every pseudo-token is in ``[0, VOCAB_SIZE)``."""
TOKEN_SEED = 0x5EED_B10C_7043_0001
"""Default seed of the block -> token mapping (any 64-bit value; fixed so runs are comparable)."""

_VOCAB = np.uint64(VOCAB_SIZE)


@njit(cache=True)
def _expand(
    block_ids: NDArray[np.int64],
    block_offsets: NDArray[np.int64],
    prompt_len: NDArray[np.int64],
    block_tokens: int,
    seed: np.uint64,
    out_offsets: NDArray[np.int64],
    out: NDArray[np.int32],
) -> None:
    bt = np.int64(block_tokens)
    for i in range(prompt_len.shape[0]):
        base = out_offsets[i]
        remaining = prompt_len[i]
        b = block_offsets[i]
        pos = np.int64(0)
        while remaining > 0:
            s = finalize(np.uint64(block_ids[b]) ^ seed)
            take = bt if remaining > bt else remaining
            for j in range(take):
                z = s + np.uint64(j + 1) * GOLDEN
                out[base + pos + j] = np.int32(finalize(z) % _VOCAB)
            pos += take
            remaining -= take
            b += 1


def _int_array(x: object, name: str) -> NDArray[np.int64]:
    a = np.asarray(x)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise InvalidInputError(
            f"{name}: expected a 1-D integer array, got shape {a.shape} dtype {a.dtype}"
        )
    return np.ascontiguousarray(a, dtype=np.int64)


def expand_blocks(
    block_ids: NDArray[np.int64],
    block_offsets: NDArray[np.int64],
    prompt_len: NDArray[np.int64],
    block_tokens: int,
    seed: int = TOKEN_SEED,
) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
    """Tokens of many prompts as CSR ``(tokens_flat, offsets)``, in one kernel call.

    Prompt i has blocks ``block_ids[block_offsets[i]:block_offsets[i+1]]``, which must number
    exactly ``ceil(prompt_len[i] / block_tokens)`` (its last block is truncated to the prompt);
    ``block_offsets[0]`` may be non-zero (a slice of a bigger CSR). The result holds prompt i at
    ``tokens_flat[offsets[i]:offsets[i+1]]`` with ``offsets[0] == 0`` — exactly the CSR that
    ``kvcompass.keys.PrefixHasher.keys_at_batch`` takes. Raises ``InvalidInputError`` on bad
    shapes, dtypes, negative ids or lengths, or a block count that does not match.
    """
    if not isinstance(block_tokens, int | np.integer) or int(block_tokens) <= 0:
        raise InvalidInputError(f"block_tokens: expected a positive int, got {block_tokens!r}")
    if not isinstance(seed, int | np.integer) or not 0 <= int(seed) < 2**64:
        raise InvalidInputError(f"seed: expected an int in [0, 2**64), got {seed!r}")
    bt = int(block_tokens)
    ids = _int_array(block_ids, "block_ids")
    offs = _int_array(block_offsets, "block_offsets")
    lens = _int_array(prompt_len, "prompt_len")
    if offs.shape[0] != lens.shape[0] + 1:
        raise InvalidInputError(
            f"block_offsets: expected {lens.shape[0] + 1} entries (n + 1), got {offs.shape[0]}"
        )
    if lens.size and int(lens.min()) < 0:
        raise InvalidInputError(f"prompt_len: expected >= 0, got min {int(lens.min())}")
    if offs.size and (int(offs[0]) < 0 or int(offs[-1]) > ids.shape[0]):
        raise InvalidInputError(
            f"block_offsets: expected values in [0, {ids.shape[0]}], got {int(offs[0])}.."
            f"{int(offs[-1])}"
        )
    counts = np.diff(offs)
    need = -(-lens // bt)
    if not np.array_equal(counts, need):
        bad = int(np.flatnonzero(counts != need)[0])
        raise InvalidInputError(
            f"block_offsets: prompt {bad} needs ceil({int(lens[bad])}/{bt}) = {int(need[bad])} "
            f"blocks, got {int(counts[bad])}"
        )
    used = ids[int(offs[0]) : int(offs[-1])]
    if used.size and int(used.min()) < 0:
        raise InvalidInputError(f"block_ids: expected >= 0, got min {int(used.min())}")
    out_offsets = np.zeros(lens.shape[0] + 1, dtype=np.int64)
    np.cumsum(lens, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), dtype=np.int32)
    _expand(ids, offs, lens, bt, np.uint64(int(seed)), out_offsets, out)
    return out, out_offsets
