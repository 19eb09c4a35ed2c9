"""Prefix keys: the 63-bit name of "the first c tokens of a prompt, in this model namespace".

Owns the key derivation (architecture §3) and its fast paths. Must not know tables, levels or
shards: callers pass the lengths they want (``kvcompass.levels`` decides which).

Key derivation (the wire contract; workers, pipeline and edges must agree bit for bit)::

    data = KeyNamespace.header_bytes() + tokens[:c] as int32 little-endian (4 bytes per token)
    h1, h2 = MurmurHash3_x64_128(data, seed=0)      # h1 = first 8 digest bytes, little-endian
    key = h1 & 0x7FFF_FFFF_FFFF_FFFF                # bits 0..62 of h1; bit 63 and h2 dropped
        = mmh3.hash128(data, seed=0, signed=False) & (2**63 - 1)

The header is a whole number of 16-byte MurmurHash3 blocks, so token offsets that are multiples
of 4 tokens fall on block boundaries and the hash state after the header is computed once per
namespace. One pass over a prompt yields the keys at every requested length: the 128-bit state is
carried through the blocks and finalised (tail + length mixing) at each cut point, never
re-hashing the prompt per length. The numba kernels below do that; the slow twin feeding
``mmh3.mmh3_x64_128`` hasher objects segment by segment lives in ``tests/naive.py``
(``bench/keys.py`` measured both; the kernels won, see bench/README.md "Prefix keys").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import mmh3
import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError

KEY_BITS = 63
KEY_MASK = (1 << KEY_BITS) - 1
HASH_SEED = 0
"""MurmurHash3 seed of every key; namespaces are separated by the header, not by the seed."""
HEADER_MAGIC = b"KVCK"
HEADER_VERSION = 1
MAX_TOKEN_ID = 2**31 - 1

_C1 = np.uint64(0x87C37B91114253D5)
_C2 = np.uint64(0x4CF5AD432745937F)
_F1 = np.uint64(0xFF51AFD7ED558CCD)
_F2 = np.uint64(0xC4CEB9FE1A85EC53)
_MASK32 = np.uint64(0xFFFFFFFF)
_MASK63 = np.uint64(KEY_MASK)


@dataclass(frozen=True, slots=True)
class KeyNamespace:
    """Everything that makes two identical token prefixes NOT share a KV cache.

    ``model_id``: model name/revision; ``model_config``: anything that changes the KV bytes
    (dtype, tensor-parallel layout, RoPE scaling...); ``sharing_group``: optional tenant salt
    (paper §6); ``None`` and ``""`` are different namespaces.
    """

    model_id: str
    model_config: str = ""
    sharing_group: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.model_id, str) or not self.model_id:
            raise InvalidInputError(f"model_id: expected a non-empty str, got {self.model_id!r}")
        if not isinstance(self.model_config, str):
            raise InvalidInputError(f"model_config: expected str, got {self.model_config!r}")
        if self.sharing_group is not None and not isinstance(self.sharing_group, str):
            raise InvalidInputError(
                f"sharing_group: expected str or None, got {self.sharing_group!r}"
            )
        self.header_bytes()  # fail at construction on text that is not valid UTF-8

    def header_bytes(self) -> bytes:
        """The bytes hashed before the tokens; length a multiple of 16.

        Layout (all integers little-endian)::

            0   4  magic b"KVCK"
            4   1  version (1)
            5   1  1 if sharing_group is set else 0
            6   2  zero
            8      u32 length + UTF-8 bytes of model_id, then of model_config, then of
                   sharing_group (length 0 when unset)
            ..     zero padding to the next multiple of 16 bytes

        The fields are length-prefixed, so the header is self-delimiting and distinct
        namespaces can never produce the same (header + tokens) byte string.
        """
        parts = [
            HEADER_MAGIC,
            struct.pack("<BBH", HEADER_VERSION, self.sharing_group is not None, 0),
        ]
        for text in (self.model_id, self.model_config, self.sharing_group or ""):
            try:
                raw = text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidInputError(
                    f"namespace field: expected valid UTF-8 text: {exc}"
                ) from exc
            parts.append(struct.pack("<I", len(raw)))
            parts.append(raw)
        header = b"".join(parts)
        return header + bytes(-len(header) % 16)


# ---------------------------------------------------------------------------------------------
# Kernels: trusting, over flat arrays. Inputs are validated by the public wrappers below.


@njit(cache=True, inline="always")
def _rotl(x: np.uint64, r: int) -> np.uint64:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


@njit(cache=True, inline="always")
def _fmix(k: np.uint64) -> np.uint64:
    k ^= k >> np.uint64(33)
    k *= _F1
    k ^= k >> np.uint64(33)
    k *= _F2
    k ^= k >> np.uint64(33)
    return k


@njit(cache=True, inline="always")
def _mix_k1(k1: np.uint64) -> np.uint64:
    k1 *= _C1
    k1 = _rotl(k1, 31)
    return k1 * _C2


@njit(cache=True, inline="always")
def _mix_k2(k2: np.uint64) -> np.uint64:
    k2 *= _C2
    k2 = _rotl(k2, 33)
    return k2 * _C1


@njit(cache=True, inline="always")
def _block(
    h1: np.uint64, h2: np.uint64, k1: np.uint64, k2: np.uint64
) -> tuple[np.uint64, np.uint64]:
    h1 ^= _mix_k1(k1)
    h1 = _rotl(h1, 27)
    h1 += h2
    h1 = h1 * np.uint64(5) + np.uint64(0x52DCE729)
    h2 ^= _mix_k2(k2)
    h2 = _rotl(h2, 31)
    h2 += h1
    h2 = h2 * np.uint64(5) + np.uint64(0x38495AB5)
    return h1, h2


@njit(cache=True, inline="always")
def _tok(tokens: NDArray[np.int32], i: int) -> np.uint64:
    return np.uint64(tokens[i]) & _MASK32


@njit(cache=True)
def _header_state(words: NDArray[np.uint64]) -> tuple[np.uint64, np.uint64]:
    """Hash state (h1, h2) after absorbing the header, given as little-endian u64 words."""
    h1 = np.uint64(0)  # seed 0 (HASH_SEED)
    h2 = np.uint64(0)
    for b in range(words.shape[0] // 2):
        h1, h2 = _block(h1, h2, words[2 * b], words[2 * b + 1])
    return h1, h2


@njit(cache=True)
def _keys_one(
    h1: np.uint64,
    h2: np.uint64,
    header_len: int,
    tokens: NDArray[np.int32],
    t0: int,
    lengths: NDArray[np.int64],
    n_cuts: int,
    out: NDArray[np.uint64],
    o0: int,
) -> None:
    """Keys of tokens[t0:t0+c] for c in lengths[:n_cuts] into out[o0:]; one pass, state carried."""
    done = 0  # full 4-token blocks absorbed so far
    for j in range(n_cuts):
        c = lengths[j]
        nblocks = c // 4
        while done < nblocks:
            p = t0 + 4 * done
            k1 = _tok(tokens, p) | (_tok(tokens, p + 1) << np.uint64(32))
            k2 = _tok(tokens, p + 2) | (_tok(tokens, p + 3) << np.uint64(32))
            h1, h2 = _block(h1, h2, k1, k2)
            done += 1
        # Tail (1-3 tokens = 4, 8 or 12 bytes) and finalisation on copies: the carried state
        # stays at the block boundary for the next, longer cut.
        f1 = h1
        f2 = h2
        rem = c - 4 * nblocks
        if rem > 0:
            p = t0 + 4 * nblocks
            k1 = _tok(tokens, p)
            if rem >= 2:
                k1 |= _tok(tokens, p + 1) << np.uint64(32)
            if rem == 3:
                f2 ^= _mix_k2(_tok(tokens, p + 2))
            f1 ^= _mix_k1(k1)
        total = np.uint64(header_len + 4 * c)
        f1 ^= total
        f2 ^= total
        f1 += f2
        f2 += f1
        f1 = _fmix(f1)
        f2 = _fmix(f2)
        f1 += f2
        out[o0 + j] = f1 & _MASK63


@njit(cache=True)
def _keys_batch(
    h1: np.uint64,
    h2: np.uint64,
    header_len: int,
    tokens_flat: NDArray[np.int32],
    offsets: NDArray[np.int64],
    lengths: NDArray[np.int64],
    key_offsets: NDArray[np.int64],
    out: NDArray[np.uint64],
) -> None:
    for i in range(offsets.shape[0] - 1):
        n_cuts = key_offsets[i + 1] - key_offsets[i]
        _keys_one(h1, h2, header_len, tokens_flat, offsets[i], lengths, n_cuts, out, key_offsets[i])


# ---------------------------------------------------------------------------------------------
# Validating wrappers.


@njit(cache=True)
def _first_negative(a: NDArray[np.int32]) -> int:
    # A branch-free OR of the sign bits vectorises; the index is searched only on failure.
    acc = np.int32(0)
    for i in range(a.shape[0]):
        acc |= a[i]
    if acc >= 0:
        return -1
    for i in range(a.shape[0]):
        if a[i] < 0:
            return i
    return -1


@njit(cache=True)
def _first_bad_length(lens: NDArray[np.int64], max_len: int) -> int:
    """Index of the first length < 1, > max_len or below its predecessor; -1 if none."""
    prev = 1
    for i in range(lens.shape[0]):
        c = lens[i]
        if c < prev or c > max_len:
            return i
        prev = c
    return -1


def _as_tokens(tokens: object, what: str) -> NDArray[np.int32]:
    arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
    if arr.ndim != 1:
        raise InvalidInputError(f"{what}: expected a 1-D array of token ids, got shape {arr.shape}")
    if arr.dtype != np.int32:
        if arr.dtype.kind not in "iu" and arr.size:
            raise InvalidInputError(
                f"{what}: expected an integer (int32) array, got dtype {arr.dtype}"
            )
        if arr.size and (int(arr.max()) > MAX_TOKEN_ID or int(arr.min()) < 0):
            raise InvalidInputError(
                f"{what}: expected token ids in [0, {MAX_TOKEN_ID}], "
                f"got range [{int(arr.min())}, {int(arr.max())}]"
            )
        return np.ascontiguousarray(arr, dtype=np.int32)
    out = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
    bad = _first_negative(out)
    if bad >= 0:
        raise InvalidInputError(
            f"{what}: expected non-negative token ids, got {int(out[bad])} at index {bad}"
        )
    return out


def _as_lengths(lengths: object, max_len: int) -> NDArray[np.int64]:
    arr = lengths if isinstance(lengths, np.ndarray) else np.asarray(lengths)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise InvalidInputError(
            f"lengths: expected a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}"
        )
    out = np.ascontiguousarray(arr, dtype=np.int64)
    bad = _first_bad_length(out, max_len)
    if bad >= 0:
        prev = int(out[bad - 1]) if bad else 1
        raise InvalidInputError(
            f"lengths: expected ascending lengths in [{prev}, {max_len}] at index {bad}, "
            f"got {int(out[bad])}"
        )
    return out


class PrefixHasher:
    """Keys of prompt prefixes in one namespace. Holds only the precomputed header state."""

    __slots__ = ("_h1", "_h2", "_header_len", "namespace")

    def __init__(self, namespace: KeyNamespace) -> None:
        self.namespace = namespace
        header = namespace.header_bytes()
        self._header_len = len(header)
        h1, h2 = _header_state(np.frombuffer(header, dtype="<u8").astype(np.uint64))
        # numba hands uint64 back as Python int; re-wrap so the kernels are typed uint64, not
        # int64 (which would silently mix into float64 arithmetic).
        self._h1 = np.uint64(h1)
        self._h2 = np.uint64(h2)

    def keys_at(self, tokens: NDArray[np.int32], lengths: NDArray[np.int64]) -> NDArray[np.uint64]:
        """Keys of ``tokens[:c]`` for every c in ``lengths`` (ascending, 1 <= c <= len(tokens)).

        Raises ``InvalidInputError`` on non-integer or negative token ids, ids above int32,
        non-1-D arrays, or lengths out of order or range.
        """
        toks = _as_tokens(tokens, "tokens")
        lens = _as_lengths(lengths, toks.shape[0])
        out = np.empty(lens.shape[0], dtype=np.uint64)
        _keys_one(self._h1, self._h2, self._header_len, toks, 0, lens, lens.shape[0], out, 0)
        return out

    def keys_at_batch(
        self,
        tokens_flat: NDArray[np.int32],
        offsets: NDArray[np.int64],
        lengths: NDArray[np.int64],
    ) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """Keys of many prompts in one kernel call, as CSR ``(keys, key_offsets)``.

        Prompt i is ``tokens_flat[offsets[i]:offsets[i+1]]`` (``offsets[0] == 0``,
        non-decreasing, ``offsets[-1] == len(tokens_flat)``); its keys are
        ``keys[key_offsets[i]:key_offsets[i+1]]``, one per length in ``lengths`` that is <= the
        prompt's length, in the order of ``lengths``.
        """
        toks = _as_tokens(tokens_flat, "tokens_flat")
        offs = np.asarray(offsets)
        if offs.ndim != 1 or offs.size == 0 or (offs.dtype.kind not in "iu"):
            raise InvalidInputError(
                f"offsets: expected a non-empty 1-D integer array, got shape {offs.shape} "
                f"dtype {offs.dtype}"
            )
        offs = np.ascontiguousarray(offs, dtype=np.int64)
        if int(offs[0]) != 0 or int(offs[-1]) != toks.shape[0]:
            raise InvalidInputError(
                f"offsets: expected offsets[0] == 0 and offsets[-1] == {toks.shape[0]}, "
                f"got {int(offs[0])} and {int(offs[-1])}"
            )
        sizes = np.diff(offs)
        if sizes.size and int(sizes.min()) < 0:
            raise InvalidInputError("offsets: expected non-decreasing offsets, got a decrease")
        lens = _as_lengths(lengths, np.iinfo(np.int64).max)
        key_offsets = np.zeros(offs.shape[0], dtype=np.int64)
        np.cumsum(np.searchsorted(lens, sizes, side="right"), out=key_offsets[1:])
        out = np.empty(int(key_offsets[-1]), dtype=np.uint64)
        _keys_batch(self._h1, self._h2, self._header_len, toks, offs, lens, key_offsets, out)
        return out, key_offsets


def prompt_key(namespace: KeyNamespace, tokens: NDArray[np.int32], length: int) -> int:
    """Key of ``tokens[:length]``, straight from ``mmh3.hash128``: slow, for tools and tests."""
    toks = _as_tokens(tokens, "tokens")
    if isinstance(length, bool) or not 1 <= int(length) <= toks.shape[0]:
        raise InvalidInputError(f"length: expected 1 <= length <= {toks.shape[0]}, got {length}")
    data = namespace.header_bytes() + toks[: int(length)].astype("<i4").tobytes()
    return int(mmh3.hash128(data, HASH_SEED, signed=False)) & KEY_MASK
