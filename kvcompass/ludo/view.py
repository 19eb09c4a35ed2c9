"""The keyless Ludo view (edge side): arrays only, in memory or over an mmap'd file.

Owns: ``ViewArrays`` (the layout, documented in ``kernels.py``) and ``LudoView`` (validating
wrappers around the lookup and patch-apply kernels). Must not: hold keys, open files
(``wire.view_files`` maps ``ViewArrays`` onto a file), or decide when an epoch is switched (the
caller builds a new view for a new epoch and keeps the old one serving until ``committed``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import kernels
from kvcompass.ludo.params import LudoParams
from kvcompass.ludo.patches import PatchBatch

_KEY_LIMIT = 1 << 63


def _check_array(name: str, a: object, dtype: type, shape: tuple[int, ...]) -> None:
    if not isinstance(a, np.ndarray):
        raise InvalidInputError(f"{name}: expected a numpy array, got {type(a).__name__}")
    if a.dtype != dtype or a.shape != shape:
        exp = f"{np.dtype(dtype)}{shape}"
        raise InvalidInputError(f"{name}: expected {exp}, got {a.dtype}{a.shape}")
    if not a.flags.c_contiguous:
        raise InvalidInputError(f"{name}: expected a C-contiguous array")


def check_keys(keys: object) -> NDArray[np.uint64]:
    """Validate a 1-D ``uint64`` key array with every key < 2**63."""
    if not isinstance(keys, np.ndarray) or keys.dtype != np.uint64 or keys.ndim != 1:
        got = f"{keys.dtype}{keys.shape}" if isinstance(keys, np.ndarray) else type(keys).__name__
        raise InvalidInputError(f"keys: expected a 1-D uint64 array, got {got}")
    if keys.shape[0] and int(keys.max()) >= _KEY_LIMIT:
        raise InvalidInputError(f"keys: expected every key < 2**63, got {int(keys.max())}")
    return np.ascontiguousarray(keys)


@dataclass(slots=True)
class ViewArrays:
    """The keyless layout of one Ludo structure (see ``kernels.py`` for the exact encoding)."""

    seeds: NDArray[np.uint8]
    values: NDArray[np.uint32]
    fps: NDArray[np.uint8]
    locator: NDArray[np.uint64]

    @staticmethod
    def allocate(params: LudoParams) -> ViewArrays:
        """Zeroed arrays for ``params`` (an empty view: every lookup returns 0)."""
        slots = params.n_slots
        return ViewArrays(
            seeds=np.zeros(params.n_buckets, np.uint8),
            values=np.zeros(slots * params.value_words, np.uint32),
            fps=np.zeros(slots * params.fp_bytes, np.uint8),
            locator=np.zeros(params.n_locator_words, np.uint64),
        )

    def check(self, params: LudoParams) -> None:
        """Raise ``InvalidInputError`` unless dtypes and shapes match ``params``."""
        slots = params.n_slots
        _check_array("seeds", self.seeds, np.uint8, (params.n_buckets,))
        _check_array("values", self.values, np.uint32, (slots * params.value_words,))
        _check_array("fps", self.fps, np.uint8, (slots * params.fp_bytes,))
        _check_array("locator", self.locator, np.uint64, (params.n_locator_words,))

    @property
    def nbytes(self) -> int:
        """Bytes of the four arrays."""
        return int(self.seeds.nbytes + self.values.nbytes + self.fps.nbytes + self.locator.nbytes)


def _same_sizes(a: LudoParams, b: LudoParams) -> bool:
    return (a.n_buckets, a.locator_a_cells, a.locator_b_cells, a.value_bits, a.fp_bits) == (
        b.n_buckets,
        b.locator_a_cells,
        b.locator_b_cells,
        b.value_bits,
        b.fp_bits,
    )


class LudoView:
    """Keyless replica of one (table, shard, epoch): lookups and whole-image patches.

    ``committed`` becomes True when a batch with ``commit=True`` is applied (a full image of the
    epoch has arrived); the view answers lookups either way.
    """

    __slots__ = ("_arrays", "_params", "_parr", "committed")

    def __init__(self, params: LudoParams, arrays: ViewArrays) -> None:
        if not isinstance(params, LudoParams):
            raise InvalidInputError(f"params: expected LudoParams, got {type(params).__name__}")
        if not isinstance(arrays, ViewArrays):
            raise InvalidInputError(f"arrays: expected ViewArrays, got {type(arrays).__name__}")
        arrays.check(params)
        self._params = params
        self._parr = params.to_array()
        self._arrays = arrays
        self.committed = False

    @classmethod
    def empty(cls, params: LudoParams) -> LudoView:
        """A view with zeroed arrays for ``params``."""
        return cls(params, ViewArrays.allocate(params))

    @property
    def params(self) -> LudoParams:
        """Sizes and seeds the view currently answers with."""
        return self._params

    @property
    def arrays(self) -> ViewArrays:
        """The underlying arrays (shared, not copied)."""
        return self._arrays

    def lookup(self, keys: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """Values for ``keys`` (0 = no holder); keys are ``uint64`` < 2**63."""
        keys = check_keys(keys)
        out = np.empty(keys.shape[0], np.uint64)
        a = self._arrays
        kernels.lookup_batch(self._parr, a.seeds, a.values, a.fps, a.locator, keys, out)
        return out

    def lookup_one(self, key: int) -> int:
        """Value for one ``key`` (0 = no holder)."""
        if not 0 <= key < _KEY_LIMIT:
            raise InvalidInputError(f"key: expected 0 <= key < 2**63, got {key}")
        a = self._arrays
        return int(
            kernels.lookup_one(self._parr, a.seeds, a.values, a.fps, a.locator, np.uint64(key))
        )

    def apply(self, batch: PatchBatch, *, checked: bool = False) -> None:
        """Apply a batch: adopt its params if ``header``, then bucket images, then words.

        The batch must be of this view's epoch and sizes (a new epoch needs a new view). A
        non-header batch is applied with the view's current seeds (images do not depend on them).
        ``checked``: the caller already validated this very batch against a view of the same
        params (its arrays' dtypes, shapes and id ranges), so the array checks are skipped; the
        epoch and size checks always run. The simulator applies each patch to one view per edge.
        """
        if not isinstance(batch, PatchBatch):
            raise InvalidInputError(f"batch: expected PatchBatch, got {type(batch).__name__}")
        p = batch.params
        if p.epoch != self._params.epoch:
            raise InvalidInputError(
                f"batch epoch: expected {self._params.epoch} (this view), got {p.epoch}; "
                "build a new LudoView for a new epoch"
            )
        if p is not self._params and not _same_sizes(p, self._params):
            raise InvalidInputError(f"batch params: expected sizes of {self._params}, got {p}")
        if not checked:
            self._check_batch(batch)
        a = self._arrays
        # one plain ``and`` chain: this runs once per view per patch in the simulator
        if not (
            a.seeds.flags.writeable
            and a.values.flags.writeable
            and a.fps.flags.writeable
            and a.locator.flags.writeable
        ):
            raise InvalidInputError("view arrays: expected writable arrays to apply, got read-only")
        if batch.header:
            self._params = p
            self._parr = p.to_array()
        a = self._arrays
        kernels.apply_images(
            self._parr,
            a.seeds,
            a.values,
            a.fps,
            a.locator,
            batch.bucket_ids,
            batch.bucket_seeds,
            batch.bucket_values,
            batch.bucket_fps,
            batch.word_ids,
            batch.words,
        )
        if batch.commit:
            self.committed = True

    def _check_batch(self, batch: PatchBatch) -> None:
        for name in ("bucket_ids", "word_ids"):
            ids = getattr(batch, name)
            if not isinstance(ids, np.ndarray) or ids.ndim != 1:
                raise InvalidInputError(f"{name}: expected a 1-D int64 array")
        n = int(batch.bucket_ids.shape[0])
        m = int(batch.word_ids.shape[0])
        _check_array("bucket_ids", batch.bucket_ids, np.int64, (n,))
        _check_array("bucket_seeds", batch.bucket_seeds, np.uint8, (n,))
        _check_array("bucket_values", batch.bucket_values, np.uint64, (n, 4))
        _check_array("bucket_fps", batch.bucket_fps, np.uint16, (n, 4))
        _check_array("word_ids", batch.word_ids, np.int64, (m,))
        _check_array("words", batch.words, np.uint64, (m,))
        p = self._params
        problem = _batch_problem(
            batch.bucket_ids,
            p.n_buckets,
            batch.word_ids,
            p.n_locator_words,
            batch.bucket_values,
            p.value_bits == 32,
            batch.bucket_fps,
            p.fp_bits == 8,
        )
        if problem == 0:
            return
        _check_ids("bucket_ids", batch.bucket_ids, p.n_buckets)
        _check_ids("word_ids", batch.word_ids, p.n_locator_words)
        if problem == 3:
            raise InvalidInputError("bucket_values: expected values < 2**32 for 32-bit views")
        raise InvalidInputError("bucket_fps: expected fingerprints < 256 for 8-bit views")


@njit(cache=True)
def _batch_problem(
    bucket_ids: NDArray[np.int64],
    n_buckets: int,
    word_ids: NDArray[np.int64],
    n_words: int,
    values: NDArray[np.uint64],
    values_32: bool,
    fps: NDArray[np.uint16],
    fps_8: bool,
) -> int:
    """0, or the first failed check of ``_check_batch`` (1 bucket id, 2 word id, 3 value, 4 fp).

    One pass instead of six numpy reductions: every patch an edge applies goes through here.
    """
    for i in range(bucket_ids.shape[0]):
        if bucket_ids[i] < 0 or bucket_ids[i] >= n_buckets:
            return 1
    for i in range(word_ids.shape[0]):
        if word_ids[i] < 0 or word_ids[i] >= n_words:
            return 2
    if values_32:
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                if values[i, j] >> np.uint64(32):
                    return 3
    if fps_8:
        for i in range(fps.shape[0]):
            for j in range(fps.shape[1]):
                if fps[i, j] > 0xFF:
                    return 4
    return 0


def _check_ids(name: str, ids: NDArray[np.int64], limit: int) -> None:
    if ids.shape[0] and (int(ids.min()) < 0 or int(ids.max()) >= limit):
        got = f"[{int(ids.min())}, {int(ids.max())}]"
        raise InvalidInputError(f"{name}: expected ids in [0, {limit}), got range {got}")
