"""SplitMix64, the project's one seeded 64-bit mixer (the only place its constants are written).

Owns the SplitMix64 finaliser (Steele, Lea, Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014; the constants of Java's ``SplittableRandom.mix64``) and the seeded
hash built from it. Every hash in the tree that is not the MurmurHash3 prefix key (``keys``)
composes these: the Ludo index's four hash families (``ludo.hashing``), the hash rings
(``ring``), the simulator's pseudo-tokens and hash tables. Must not hold state or depend on
Python's ``hash()``.

Definitions (arithmetic modulo 2**64)::

    finalize(z) = z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
                  z *= 0x94D049BB133111EB; z ^= z >> 31
    splitmix64(x, seed) = finalize((x ^ seed) + GOLDEN)       GOLDEN = 0x9E3779B97F4A7C15

``splitmix64(x, seed)`` is the first output of a SplitMix64 generator whose state is ``x ^ seed``:
a bijection of ``x`` for a fixed seed, well spread in every bit. ``finalize`` is usable from other
numba kernels; ``splitmix64`` (Python ints) and ``splitmix64_array`` (uint64 arrays) call the same
kernel. (The Ludo index's ``ludo.hashing.mix64`` is another mixer built on ``finalize``: it
multiplies by GOLDEN instead of adding it.)
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError

GOLDEN = np.uint64(0x9E3779B97F4A7C15)
"""SplitMix64's increment (2**64 / golden ratio, odd)."""
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_M64 = (1 << 64) - 1


@njit(cache=True)
def finalize(z: np.uint64) -> np.uint64:
    """The SplitMix64 finaliser of ``z`` (a bijection of 64-bit words)."""
    z = np.uint64(z)
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True)
def _mix(x: np.uint64, seed: np.uint64) -> np.uint64:
    return finalize((np.uint64(x) ^ np.uint64(seed)) + GOLDEN)


@njit(cache=True)
def _mix_all(x: NDArray[np.uint64], seed: np.uint64, out: NDArray[np.uint64]) -> None:
    for i in range(x.shape[0]):
        out[i] = _mix(x[i], seed)


def splitmix64(x: int, seed: int) -> int:
    """``finalize((x ^ seed) + GOLDEN)`` of two 64-bit values, as a Python int."""
    return int(_mix(np.uint64(x & _M64), np.uint64(seed & _M64)))


def splitmix64_array(x: NDArray[np.uint64], seed: int) -> NDArray[np.uint64]:
    """``splitmix64`` of every element of a 1-D uint64 array (a new array)."""
    a = np.ascontiguousarray(x, dtype=np.uint64)
    if a.ndim != 1:
        raise InvalidInputError(f"splitmix64_array: expected a 1-D array, got shape {a.shape}")
    out = np.empty_like(a)
    _mix_all(a, np.uint64(seed & _M64), out)
    return out
