"""The maintenance side of one (table, shard): the sole writer, holding the full 63-bit keys.

Owns: ``LudoTable`` — validating wrappers around the kernels of ``ops.py``, growth into a new
epoch (2x capacity) and turning the kernels' dirty lists into ``PatchBatch`` images. Must not: do
I/O, sequence patches (the pipeline numbers them) or keep any state outside ``TableState`` and the
constructor's seeded generator (determinism: same seed + same ops -> same patches).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import ops
from kvcompass.ludo.params import P_FP_BITS, P_VALUE_BITS, LudoParams
from kvcompass.ludo.patches import PatchBatch, batch_from_arrays
from kvcompass.ludo.state import (
    EMPTY,
    M_ALLW,
    M_BFS,
    M_BFS_NODES,
    M_KICKS,
    M_LEVELS,
    M_LIVE,
    M_NB,
    M_NW,
    M_REBUILDS,
    M_WALKED,
    M_WALKS,
    TableState,
    allocate_state,
    unpack,
)
from kvcompass.ludo.view import ViewArrays, check_keys

_U64_LIMIT = 1 << 64


def _check_u64(name: str, a: object, n: int) -> NDArray[np.uint64]:
    if not isinstance(a, np.ndarray) or a.dtype != np.uint64 or a.shape != (n,):
        got = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
        raise InvalidInputError(f"{name}: expected uint64 of shape ({n},), got {got}")
    return np.ascontiguousarray(a)


class LudoTable:
    """Keyed Ludo table of one (table, shard); every mutating call returns its ``PatchBatch``."""

    __slots__ = ("_capacity", "_fp_bits", "_grow_at", "_params", "_rng", "_st", "_value_bits")

    def __init__(
        self,
        capacity: int,
        *,
        value_bits: int = 32,
        fp_bits: int = 8,
        seed: int = 0,
        grow_at: float = 0.95,
    ) -> None:
        if not isinstance(capacity, int | np.integer) or capacity < 1:
            raise InvalidInputError(f"capacity: expected an int >= 1, got {capacity!r}")
        if not isinstance(seed, int | np.integer) or seed < 0:
            raise InvalidInputError(f"seed: expected an int >= 0, got {seed!r}")
        if not 0.0 < float(grow_at) <= 1.0:
            raise InvalidInputError(f"grow_at: expected 0 < grow_at <= 1, got {grow_at!r}")
        self._rng = np.random.Generator(np.random.PCG64(int(seed)))
        self._grow_at = float(grow_at)
        self._value_bits = value_bits
        self._fp_bits = fp_bits
        self._st, self._params = self._allocate(int(capacity), 0)
        self._capacity = int(capacity)

    def _allocate(self, capacity: int, epoch: int) -> tuple[TableState, LudoParams]:
        params = LudoParams.for_capacity(
            capacity,
            value_bits=self._value_bits,
            fp_bits=self._fp_bits,
            rng=self._rng,
            epoch=epoch,
        )
        max_live = math.floor(self._grow_at * params.n_slots)
        rng_seed = int(self._rng.integers(0, _U64_LIMIT, dtype=np.uint64))
        return allocate_state(params, max_live, rng_seed), params

    @property
    def params(self) -> LudoParams:
        """Current sizes and seeds (changes on growth and on a locator rebuild)."""
        return self._params

    @property
    def epoch(self) -> int:
        """Growth generation of this (table, shard)."""
        return self._params.epoch

    @property
    def capacity(self) -> int:
        """Keys the current epoch was sized for (grows 2x per epoch)."""
        return self._capacity

    def __len__(self) -> int:
        return int(self._st.meta[M_LIVE])

    @property
    def occupancy(self) -> float:
        """Live keys per slot, ``len / (4 * n_buckets)``."""
        return len(self) / self._params.n_slots

    def stats(self) -> dict[str, int]:
        """Counters since this epoch began (locator rebuilds, cuckoo moves, BFS and walk work)."""
        m = self._st.meta
        return {
            "locator_rebuilds": int(m[M_REBUILDS]),
            "cuckoo_moves": int(m[M_KICKS]),
            "bfs_searches": int(m[M_BFS]),
            "bfs_buckets_queued": int(m[M_BFS_NODES]),
            "bfs_levels_read": int(m[M_LEVELS]),
            "locator_walks": int(m[M_WALKS]),
            "locator_walk_nodes": int(m[M_WALKED]),
        }

    def update(
        self,
        keys: NDArray[np.uint64],
        clear_masks: NDArray[np.uint64],
        set_bits: NDArray[np.uint64],
    ) -> PatchBatch:
        """Per key, in order: ``v' = (v & ~clear) | set``; 0 removes, absent + non-zero inserts.

        Returns the last image of every bucket and locator word touched; a full image of the new
        epoch if the table grew (``header`` and ``commit`` set). Cost: ~0.1-0.2 us per update or
        remove and ~0.5-2.5 us per insert (rising with occupancy) inside the kernel, plus ~25 us
        per call of Python; a locator rebuild (~0.4 s per try at 10^6 keys, rare) or a growth
        (~2 s at 10^6) makes that one call slow.
        """
        keys = check_keys(keys)
        n = keys.shape[0]
        clears = _check_u64("clear_masks", clear_masks, n)
        sets = _check_u64("set_bits", set_bits, n)
        if self._value_bits == 32 and n and int(sets.max()) >> 32:
            raise InvalidInputError(
                f"set_bits: expected values < 2**32 for a 32-bit table, got {int(sets.max())}"
            )
        return self._update(keys, clears, sets)

    def update_unchecked(
        self,
        keys: NDArray[np.uint64],
        clear_masks: NDArray[np.uint64],
        set_bits: NDArray[np.uint64],
    ) -> PatchBatch:
        """``update`` without its input checks: the trusted path for a caller that validated.

        Only for callers that guarantee what ``update`` checks: 1-D C-contiguous ``uint64``
        arrays of one length, keys < 2**63, and set bits within the table's value bits.
        ``ShardState.apply`` does (one njit pass over the ops; the layout fits every field in
        its table's value bits). Anything else corrupts the table silently.
        """
        return self._update(keys, clear_masks, set_bits)

    def _update(
        self, keys: NDArray[np.uint64], clears: NDArray[np.uint64], sets: NDArray[np.uint64]
    ) -> PatchBatch:
        n = keys.shape[0]
        status, i = ops.update_batch(self._st.mem, keys, clears, sets, 0, n)
        grown = False
        base_epoch = self._params.epoch
        while status != ops.OK:
            self._grow(base_epoch + 1)
            grown = True
            start = i + 1 if status == ops.LOCATOR else i
            status, i = ops.update_batch(self._st.mem, keys, clears, sets, start, n)
        return self._emit(full=grown)

    def clear_bits(self, mask: int) -> PatchBatch:
        """Every entry: ``v &= ~mask``; entries whose value becomes 0 are removed."""
        if not isinstance(mask, int | np.integer) or not 0 <= int(mask) < _U64_LIMIT:
            raise InvalidInputError(f"mask: expected an int in [0, 2**64), got {mask!r}")
        ops.clear_all(self._st.mem, np.uint64(mask))
        return self._emit(full=False)

    def get(self, keys: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """Exact values for ``keys`` (0 = absent)."""
        keys = check_keys(keys)
        out = np.empty(keys.shape[0], np.uint64)
        st = self._st
        ops.get_batch(st.params, st.skeys, st.values, keys, out)
        return out

    def items(self) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
        """All live ``(keys, values)``, in slot order."""
        st = self._st
        occ = np.flatnonzero(st.skeys != EMPTY)
        if self._params.value_words == 1:
            vals = st.values[occ].astype(np.uint64)
        else:
            halves = st.values.reshape(-1, 2)[occ].astype(np.uint64)
            vals = halves[:, 0] | (halves[:, 1] << np.uint64(32))
        return st.skeys[occ].copy(), vals

    def full_image(self) -> PatchBatch:
        """Header + every bucket + every word + commit: a complete bootstrap of this epoch."""
        p = self._params
        st = self._st
        return batch_from_arrays(
            p,
            st.seeds,
            st.values,
            st.fps,
            st.locator,
            np.arange(p.n_buckets, dtype=np.int64),
            np.arange(p.n_locator_words, dtype=np.int64),
            header=True,
            commit=True,
        )

    def view_arrays(self) -> ViewArrays:
        """The table's own view-layout arrays (shared: read-only use)."""
        st = self._st
        return ViewArrays(seeds=st.seeds, values=st.values, fps=st.fps, locator=st.locator)

    def rebuild(self, epoch: int) -> PatchBatch:
        """Move every live key into a fresh structure of epoch ``epoch`` (2x capacity) and return
        its full image. A restarted maintenance unit uses this to publish an epoch above every
        epoch already on the patch topic."""
        if epoch <= self._params.epoch:
            raise InvalidInputError(
                f"epoch: expected more than the current {self._params.epoch}, got {epoch}"
            )
        self._grow(epoch)
        return self._emit(full=True)

    def _grow(self, epoch: int) -> None:
        """Rebuild all live keys into a table of 2x capacity (again 2x until they all fit)."""
        keys, vals = self.items()
        capacity = self._capacity
        while True:
            capacity *= 2
            st, params = self._allocate(capacity, epoch)
            status, _ = ops.update_batch(st.mem, keys, np.zeros_like(vals), vals, 0, keys.shape[0])
            if status == ops.OK:
                break
        # a locator rebuild during the reload changed the seed in st.params
        params = LudoParams.from_array(st.params.copy())
        self._st, self._params, self._capacity = st, params, capacity
        self._reset_dirty()

    def _reset_dirty(self) -> None:
        st = self._st
        st.bdirty[st.blist[: st.meta[M_NB]]] = 0
        st.wdirty[st.wlist[: st.meta[M_NW]]] = 0
        st.meta[M_NB] = 0
        st.meta[M_NW] = 0
        st.meta[M_ALLW] = 0

    def _emit(self, *, full: bool) -> PatchBatch:
        st = self._st
        meta = st.meta
        if not (full or meta[M_NB] or meta[M_NW] or meta[M_ALLW]):
            return PatchBatch.empty(self._params)
        header = bool(meta[M_ALLW])
        if full or header:  # a locator rebuild changed the seed in st.params
            self._params = LudoParams.from_array(st.params.copy())
        if full:
            self._reset_dirty()
            return self.full_image()
        if header:
            words = np.arange(self._params.n_locator_words, dtype=np.int64)
            buckets = np.sort(st.blist[: st.meta[M_NB]]).astype(np.int64)
            self._reset_dirty()
            return batch_from_arrays(
                self._params,
                st.seeds,
                st.values,
                st.fps,
                st.locator,
                buckets,
                words,
                header=header,
                commit=False,
            )
        # The per-call path: one njit pass does the sorts, the copies and the dirty reset that
        # ``batch_from_arrays`` + ``_reset_dirty`` do with ~15 numpy calls.
        p = self._params
        buckets, seeds, vals, fpv, words, wvals = _dirty_images(st.mem)
        if buckets.shape[0] == 0 and words.shape[0] == 0:
            return PatchBatch.empty(p)
        return PatchBatch(p, False, buckets, seeds, vals, fpv, words, wvals, False)


@njit(cache=True)
def _dirty_images(mem: NDArray[np.uint64]) -> tuple[NDArray[Any], ...]:
    """Images of the dirty buckets and words (ascending ids), then clear the dirty sets.

    Exactly ``batch_from_arrays(..., sorted dirty lists)`` followed by ``_reset_dirty`` for a
    batch without a header (the twin: ``tests/naive.py::ludo_dirty_images``). Takes the state
    buffer alone: one array to unbox per call (this runs once per ``update``).
    """
    st = unpack(mem)
    meta, seeds, values, fps, locator = st.meta, st.seeds, st.values, st.fps, st.locator
    value_words = np.int64(st.params[P_VALUE_BITS]) // 32
    fp_bytes = np.int64(st.params[P_FP_BITS]) // 8
    nb = meta[M_NB]
    nw = meta[M_NW]
    buckets = np.sort(st.blist[:nb]).astype(np.int64)
    words = np.sort(st.wlist[:nw]).astype(np.int64)
    bseeds = np.empty(nb, np.uint8)
    vals = np.empty((nb, 4), np.uint64)
    fpv = np.zeros((nb, 4), np.uint16)
    for i in range(nb):
        b = buckets[i]
        bseeds[i] = seeds[b]
        st.bdirty[b] = 0
        for s in range(4):
            slot = 4 * b + s
            if value_words == 1:
                vals[i, s] = np.uint64(values[slot])
            else:
                vals[i, s] = np.uint64(values[2 * slot]) | (
                    np.uint64(values[2 * slot + 1]) << np.uint64(32)
                )
            if fp_bytes == 1:
                fpv[i, s] = np.uint16(fps[slot])
            elif fp_bytes == 2:
                fpv[i, s] = np.uint16(fps[2 * slot]) | (
                    np.uint16(fps[2 * slot + 1]) << np.uint16(8)
                )
    wvals = np.empty(nw, np.uint64)
    for i in range(nw):
        wvals[i] = locator[words[i]]
        st.wdirty[words[i]] = 0
    meta[M_NB] = 0
    meta[M_NW] = 0
    meta[M_ALLW] = 0
    return buckets, bseeds, vals, fpv, words, wvals
