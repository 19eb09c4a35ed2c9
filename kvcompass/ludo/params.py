"""Sizes and seeds of one Ludo structure (one (table, shard, epoch)), and the patch kinds.

Owns: ``LudoParams`` (validated value object, with its fixed ``uint64`` array form used by the
kernels and the view-file header) and ``PatchKind``. Must not: hold arrays or do any I/O.

``LudoParams.to_array()`` layout (10 x ``uint64``, index: field):
``0 epoch, 1 n_buckets, 2 locator_a_cells, 3 locator_b_cells, 4 value_bits, 5 fp_bits,
6 bucket_seed, 7 locator_seed, 8 slot_seed, 9 fp_seed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError

SLOTS_PER_BUCKET = 4
LOAD_FACTOR = 0.95
EXTRA_BUCKETS = 2
"""Added to ``ceil(capacity / 0.95 / 4)`` so tiny tables are not all collisions."""
LOCATOR_RATIO = 1.33334
PARAMS_LEN = 10
_U64_LIMIT = 1 << 64
_U32_LIMIT = 1 << 32

# Indices into LudoParams.to_array(); kernels use these constants.
P_EPOCH, P_BUCKETS, P_MA, P_MB, P_VALUE_BITS, P_FP_BITS = 0, 1, 2, 3, 4, 5
P_BUCKET_SEED, P_LOCATOR_SEED, P_SLOT_SEED, P_FP_SEED = 6, 7, 8, 9


class PatchKind(IntEnum):
    """Kind of one image in a patch stream (the compacted topic keeps the latest per index)."""

    HEADER = 0
    BUCKET = 1
    LOCATOR_WORD = 2
    COMMIT = 3


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise InvalidInputError(f"LudoParams.{name}: expected an int, got {type(value).__name__}")
    if not low <= int(value) < high:
        raise InvalidInputError(f"LudoParams.{name}: expected {low} <= value < {high}, got {value}")


@dataclass(frozen=True, slots=True)
class LudoParams:
    """Sizes and hash seeds of one Ludo structure; identical on the maintenance side and views."""

    epoch: int
    n_buckets: int
    locator_a_cells: int
    locator_b_cells: int
    value_bits: int
    fp_bits: int
    bucket_seed: int
    locator_seed: int
    slot_seed: int
    fp_seed: int

    def __post_init__(self) -> None:
        _check_range("epoch", self.epoch, 0, 1 << 63)
        _check_range("n_buckets", self.n_buckets, 1, 1 << 28)  # half-edge ids fit int32
        _check_range("locator_a_cells", self.locator_a_cells, 1, 1 << 30)
        _check_range("locator_b_cells", self.locator_b_cells, 1, 1 << 30)
        if self.value_bits not in (32, 64):
            raise InvalidInputError(
                f"LudoParams.value_bits: expected 32 or 64, got {self.value_bits}"
            )
        if self.fp_bits not in (0, 8, 16):
            raise InvalidInputError(f"LudoParams.fp_bits: expected 0, 8 or 16, got {self.fp_bits}")
        for name in ("bucket_seed", "locator_seed", "slot_seed", "fp_seed"):
            _check_range(name, getattr(self, name), 0, _U64_LIMIT)

    @property
    def n_locator_words(self) -> int:
        """64-bit words holding the ``ma + mb`` one-bit locator cells."""
        return (self.locator_a_cells + self.locator_b_cells + 63) // 64

    @property
    def value_words(self) -> int:
        """32-bit words per slot value (1 or 2)."""
        return self.value_bits // 32

    @property
    def fp_bytes(self) -> int:
        """Bytes per slot fingerprint (0, 1 or 2)."""
        return self.fp_bits // 8

    @property
    def n_slots(self) -> int:
        """Slots in the bucket array (4 per bucket)."""
        return self.n_buckets * SLOTS_PER_BUCKET

    @property
    def view_bytes(self) -> int:
        """Bytes of the keyless view arrays (seeds + values + fingerprints + locator)."""
        per_bucket = 1 + SLOTS_PER_BUCKET * (4 * self.value_words + self.fp_bytes)
        return self.n_buckets * per_bucket + 8 * self.n_locator_words

    @classmethod
    def for_capacity(
        cls,
        capacity: int,
        *,
        value_bits: int = 32,
        fp_bits: int = 8,
        rng: np.random.Generator,
        epoch: int = 0,
    ) -> LudoParams:
        """Sizes for ``capacity`` keys at 95% bucket load, with fresh seeds drawn from ``rng``.

        ``B = ceil(capacity / 0.95 / 4) + 2``, ``mb = ceil(capacity / 0.95)``,
        ``ma = ceil(1.33334 * mb)`` (the Othello is acyclic with probability ~57% at full load).
        """
        if not isinstance(capacity, int | np.integer) or capacity < 1:
            raise InvalidInputError(f"capacity: expected an int >= 1, got {capacity!r}")
        mb = math.ceil(capacity / LOAD_FACTOR)
        seeds = rng.integers(0, _U64_LIMIT, size=4, dtype=np.uint64)
        return cls(
            epoch=epoch,
            n_buckets=math.ceil(capacity / LOAD_FACTOR / SLOTS_PER_BUCKET) + EXTRA_BUCKETS,
            locator_a_cells=math.ceil(LOCATOR_RATIO * mb),
            locator_b_cells=mb,
            value_bits=value_bits,
            fp_bits=fp_bits,
            bucket_seed=int(seeds[0]),
            locator_seed=int(seeds[1]),
            slot_seed=int(seeds[2]),
            fp_seed=int(seeds[3]),
        )

    def with_locator_seed(self, locator_seed: int) -> LudoParams:
        """The same structure after a locator rebuild with ``locator_seed``."""
        a = self.to_array()
        a[P_LOCATOR_SEED] = np.uint64(locator_seed)
        return LudoParams.from_array(a)

    def to_array(self) -> NDArray[np.uint64]:
        """The 10 fields as ``uint64`` in the order documented in the module docstring."""
        return np.array(
            [
                self.epoch,
                self.n_buckets,
                self.locator_a_cells,
                self.locator_b_cells,
                self.value_bits,
                self.fp_bits,
                self.bucket_seed,
                self.locator_seed,
                self.slot_seed,
                self.fp_seed,
            ],
            dtype=np.uint64,
        )

    @classmethod
    def from_array(cls, a: NDArray[np.uint64]) -> LudoParams:
        """Inverse of ``to_array``; validates dtype, shape and every field."""
        if not isinstance(a, np.ndarray) or a.dtype != np.uint64 or a.shape != (PARAMS_LEN,):
            got = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise InvalidInputError(f"params array: expected uint64 of shape (10,), got {got}")
        return cls(*(int(x) for x in a))
