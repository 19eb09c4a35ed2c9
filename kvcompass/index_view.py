"""The keyless side of the index: every (table, shard) view an edge holds, and prompt matching.

Owns applying ``ShardPatch``es in order (per-shard sequence, epochs swapped on commit) and the
multi-level match: for an edge in region o and a prompt's keys at ascending lengths, the matched
length and tier of EVERY worker, querying toward region r only levels(o, r) and applying the
prefix-monotonicity rule (architecture §5: a worker matches level l only if it holds every shorter
level of the same query, so a lone false hit at a long level is ignored). It reads no files and
no Kafka: view arrays come from an allocator (in memory, or ``wire.view_files``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.np.numpy_support import carray as _carray
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.index import ShardPatch, check_keys
from kvcompass.layout import FIELD_BITS, FIELD_MASK, TableLayout
from kvcompass.ludo import LudoParams, LudoView, ViewArrays
from kvcompass.ludo.jit import JIT_ENABLED, with_python_twin
from kvcompass.ludo.kernels import lookup_key, prefetch_key
from kvcompass.ludo.params import P_BUCKETS, P_FP_BITS, P_MA, P_MB, P_VALUE_BITS

Allocator = Callable[[int, int, LudoParams], ViewArrays]
"""(table, shard, params) -> zeroed ViewArrays for a new epoch (memory or a mapped file)."""
ParamsHook = Callable[[int, int, LudoParams, bool], None]
"""(table, shard, params, committed) called when a view adopts new params: a new epoch became the
served view (committed=True), or a served epoch's seeds changed in place (locator rebuild)."""


def _memory_allocator(table: int, shard: int, params: LudoParams) -> ViewArrays:
    return ViewArrays.allocate(params)


class Offer(Enum):
    """What the sequencer decided for one patch (decisions are data)."""

    APPLY = "apply"
    SKIP_STALE = "skip-stale"  # seq older than the shard's last applied: a duplicate or replay
    SKIP_EPOCH = "skip-epoch"  # images of an epoch older than the one being served


@dataclass(frozen=True, slots=True)
class Match:
    """Per-worker result of one prompt lookup (arrays of length W)."""

    matched_tokens: NDArray[np.int64]
    tiers: NDArray[np.uint8]


def _as_pointer_py(addr: int) -> int:
    return int(addr)


@with_python_twin(_as_pointer_py)
def _as_pointer(typingctx: Any, addr: types.Integer) -> Any:
    """int64 address -> void* (to view an array whose address is in the pointer table)."""
    sig = types.voidptr(addr)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


class _At:
    """An array's memory by address (numpy's array interface): ``carray``'s twin, JIT off."""

    def __init__(self, addr: int, shape: tuple[int, ...], dtype: Any) -> None:
        dt = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        self.__array_interface__ = {
            "data": (addr, False),
            "shape": shape,
            "typestr": dt.str,
            "version": 3,
        }


def _carray_py(addr: int, shape: tuple[int, ...], dtype: Any) -> NDArray[Any]:
    return np.asarray(_At(addr, shape, dtype))


# numba's stubs type shapes as tuple[int]; inside njit they are int64
carray: Any = _carray if JIT_ENABLED else _carray_py


@njit(inline="always", cache=True)
def _view_arrays(params: NDArray[np.uint64], ptrs: NDArray[np.int64], vid: Any) -> Any:
    """The four arrays of view ``vid`` (``ViewArrays`` order), rebuilt from the pointer table.

    Passing N views as numba typed lists costs ~1.4 µs per list per call; a table of addresses
    costs nothing, and this is the hot path of every routing decision. The ``IndexView`` keeps
    the arrays alive.
    """
    p = params[vid]
    n_buckets = np.int64(p[P_BUCKETS])
    value_words = np.int64(p[P_VALUE_BITS]) // 32
    fp_bytes = np.int64(p[P_FP_BITS]) // 8
    n_words = (np.int64(p[P_MA]) + np.int64(p[P_MB]) + 63) // 64
    seeds = carray(_as_pointer(ptrs[vid, 0]), (n_buckets,), dtype=np.uint8)
    values = carray(_as_pointer(ptrs[vid, 1]), (n_buckets * 4 * value_words,), dtype=np.uint32)
    fps = carray(_as_pointer(ptrs[vid, 2]), (n_buckets * 4 * fp_bytes,), dtype=np.uint8)
    loc = carray(_as_pointer(ptrs[vid, 3]), (n_words,), dtype=np.uint64)
    return seeds, values, fps, loc


@njit(inline="always", cache=True)
def _view_lookup(
    params: NDArray[np.uint64], ptrs: NDArray[np.int64], vid: Any, key: np.uint64
) -> np.uint64:
    """Lookup of ``key`` in view ``vid`` (see ``_view_arrays``)."""
    seeds, values, fps, loc = _view_arrays(params, ptrs, vid)
    return lookup_key(params[vid], seeds, values, fps, loc, key)


@njit(inline="always", cache=True)
def _view_prefetch(
    params: NDArray[np.uint64], ptrs: NDArray[np.int64], vid: Any, key: np.uint64
) -> None:
    """Start the cache misses ``_view_lookup(params, ptrs, vid, key)`` will take (no effect on
    results)."""
    seeds, values, fps, loc = _view_arrays(params, ptrs, vid)
    prefetch_key(params[vid], seeds, values, fps, loc, key)


@njit(cache=True)
def _query_problem(lengths: NDArray[np.int64], keys: NDArray[np.uint64]) -> int:
    """0 ok, 1 lengths not strictly ascending/positive, 2 a key >= 2**63 (one pass)."""
    prev = 0
    for i in range(lengths.shape[0]):
        if lengths[i] <= prev:
            return 1
        prev = lengths[i]
        if keys[i] >> np.uint64(63):
            return 2
    return 0


@njit(cache=True)
def _match_one(
    plan_levels: NDArray[np.int64],
    field_workers: NDArray[np.int64],
    n_fields: NDArray[np.int64],
    present: NDArray[np.bool_],
    n_shards: int,
    params: NDArray[np.uint64],
    ptrs: NDArray[np.int64],
    q_lengths: NDArray[np.int64],
    q_keys: NDArray[np.uint64],
    monotone: bool,
    matched: NDArray[np.int64],
    tiers: NDArray[np.uint8],
) -> int:
    """Fill matched/tiers (pre-zeroed); return the number of table reads made.

    Arguments, in groups: the edge's plan ``plan_levels`` (T, L); the layout ``field_workers``
    (T, F) and ``n_fields`` (T); the served views ``present``, ``n_shards``, ``params`` and
    ``ptrs`` (``_view_arrays``); the prompt ``q_lengths``, ``q_keys``; the rule ``monotone``;
    the outputs ``matched``, ``tiers`` (W). Flat, not tuples: called once per routing decision
    from Python, where numba unboxes arrays in C and tuples in Python (``ludo/kernels.py``).
    """
    n_tables, n_levels = plan_levels.shape
    alive = np.zeros(field_workers.shape[1], dtype=np.bool_)
    reads = 0
    nq = q_lengths.shape[0]
    # Every table's first read is a likely cache miss and independent of the others: start them
    # all before the first one is needed, so T tables cost about one miss, not T in a row.
    if n_levels > 0:
        for t in range(n_tables):
            j = np.searchsorted(q_lengths, plan_levels[t, 0])
            if j < nq and q_lengths[j] == plan_levels[t, 0]:
                key = q_keys[j]
                vid = t * n_shards + np.int64(key % np.uint64(n_shards))
                if present[vid]:
                    _view_prefetch(params, ptrs, vid, key)
    for t in range(n_tables):
        nf = n_fields[t]
        for f in range(nf):
            alive[f] = True
        n_alive = nf
        for lev in range(n_levels):
            length = plan_levels[t, lev]
            j = np.searchsorted(q_lengths, length)
            if j >= nq or q_lengths[j] != length:
                break  # the prompt is shorter than this level (levels ascend)
            key = q_keys[j]
            vid = t * n_shards + np.int64(key % np.uint64(n_shards))
            if not present[vid]:
                break
            v = _view_lookup(params, ptrs, vid, key)
            reads += 1
            if v == 0 and monotone:
                break
            for f in range(nf):
                if not alive[f]:
                    continue
                code = (v >> np.uint64(FIELD_BITS * f)) & np.uint64(FIELD_MASK)
                if code == 0:
                    if monotone:
                        alive[f] = False
                        n_alive -= 1
                else:
                    w = field_workers[t, f]
                    matched[w] = length
                    tiers[w] = np.uint8(code)
            if n_alive == 0:
                break
    return reads


def _address(a: NDArray[np.generic]) -> int:
    if not a.flags.c_contiguous:
        raise InvalidInputError("view arrays must be C-contiguous")
    return int(a.ctypes.data)


def _addresses(view: LudoView) -> list[int]:
    """A view's four array addresses, in the kernels' column order."""
    a = view.arrays
    return [_address(a.seeds), _address(a.values), _address(a.fps), _address(a.locator)]


class IndexView:
    """Views of every (table, shard), kept current by applying ShardPatches in order."""

    def __init__(
        self,
        layout: TableLayout,
        levels_matrix: NDArray[np.int64],
        n_shards: int,
        *,
        allocator: Allocator = _memory_allocator,
        on_params: ParamsHook | None = None,
        monotone: bool = True,
    ) -> None:
        lm = np.asarray(levels_matrix, dtype=np.int64)
        n_regions = max(layout.table_region) + 1
        if lm.ndim != 3 or lm.shape[0] != lm.shape[1] or lm.shape[0] < n_regions:
            raise InvalidInputError(
                f"levels matrix must be (R, R, L) with R >= {n_regions}, got shape {lm.shape}"
            )
        self.layout = layout
        self.n_shards = n_shards
        self.monotone = monotone
        self._allocator = allocator
        self._on_params = on_params
        self._levels = lm
        n_views = layout.n_tables * n_shards
        placeholder = LudoView.empty(LudoParams.for_capacity(4, rng=np.random.default_rng(0)))
        self.views: list[LudoView] = [placeholder] * n_views
        self.present = np.zeros(n_views, dtype=np.bool_)
        self.pending: dict[int, LudoView] = {}
        self.last_seq = np.zeros(n_shards, dtype=np.int64)
        self.n_fields = np.array([len(w) for w in layout.table_workers], dtype=np.int64)
        self._plans: dict[int, NDArray[np.int64]] = {}
        self._rebuild_lists()

    # -- patch application ------------------------------------------------------------------
    def _rebuild_lists(self) -> None:
        # Kernels reach the arrays through their addresses; ``self.views`` keeps them alive.
        self._params = np.stack([v.params.to_array() for v in self.views])
        self._ptrs = np.array([_addresses(v) for v in self.views], dtype=np.int64)

    def _refresh_row(self, vid: int) -> None:
        """``_rebuild_lists`` for one view: an install touches its own row only (rebuilding
        every row per install was quadratic in the views: 150 s of set-up at 4,096 workers)."""
        view = self.views[vid]
        self._params[vid] = view.params.to_array()
        self._ptrs[vid] = _addresses(view)

    def offer(self, patch: ShardPatch) -> Offer:
        """Sequencer decision for a patch, without applying it."""
        if not 0 <= patch.shard < self.n_shards:
            raise InvalidInputError(f"patch shard {patch.shard} outside 0..{self.n_shards - 1}")
        if not 0 <= patch.table < self.layout.n_tables:
            raise InvalidInputError(
                f"patch table {patch.table} outside 0..{self.layout.n_tables - 1}"
            )
        if patch.seq < self.last_seq[patch.shard]:
            return Offer.SKIP_STALE
        vid = patch.table * self.n_shards + patch.shard
        if self.present[vid] and patch.batch.params.epoch < self.views[vid].params.epoch:
            return Offer.SKIP_EPOCH
        return Offer.APPLY

    def apply(self, patch: ShardPatch, *, checked: bool = False) -> Offer:
        """Apply one patch if the sequencer allows; idempotent for repeated images of one seq.

        ``checked``: its batch was already validated by another view of the same layout
        (``LudoView.apply``'s trusted path)."""
        decision = self.offer(patch)
        if decision is not Offer.APPLY:
            return decision
        self.last_seq[patch.shard] = patch.seq
        vid = patch.table * self.n_shards + patch.shard
        batch = patch.batch
        epoch = batch.params.epoch
        current = self.views[vid] if self.present[vid] else None
        if current is not None and epoch == current.params.epoch:
            current.apply(batch, checked=checked)
            if batch.header:
                self._params[vid] = current.params.to_array()
                if self._on_params is not None:
                    self._on_params(patch.table, patch.shard, current.params, False)
            return decision
        target = self.pending.get(vid)
        if target is None or target.params.epoch != epoch:
            if not batch.header:
                # images of an epoch whose header we never saw (joined mid-epoch without the
                # compacted snapshot): nothing to apply them to
                return Offer.SKIP_EPOCH
            target = LudoView(batch.params, self._allocator(patch.table, patch.shard, batch.params))
            self.pending[vid] = target
        target.apply(batch)
        if batch.commit:
            del self.pending[vid]
            self.install(patch.table, patch.shard, target)
            if self._on_params is not None:
                self._on_params(patch.table, patch.shard, target.params, True)
        return decision

    def install(self, table: int, shard: int, view: LudoView, last_seq: int | None = None) -> None:
        """Serve ``view`` for (table, shard) — a committed epoch, or one restored from a file."""
        vid = table * self.n_shards + shard
        self.views[vid] = view
        self.present[vid] = True
        if last_seq is not None:
            self.last_seq[shard] = max(int(self.last_seq[shard]), last_seq)
        self._refresh_row(vid)

    def params_for(self, table: int, shard: int, epoch: int) -> LudoParams | None:
        """Params of a served or pending epoch (what a record reassembler needs on resume)."""
        vid = table * self.n_shards + shard
        for v in (self.views[vid] if self.present[vid] else None, self.pending.get(vid)):
            if v is not None and v.params.epoch == epoch:
                return v.params
        return None

    def apply_all(self, patches: Iterable[ShardPatch], *, checked: bool = False) -> int:
        """Apply in order; return how many were applied (``checked``: see ``apply``)."""
        return sum(self.apply(p, checked=checked) is Offer.APPLY for p in patches)

    # -- lookups ----------------------------------------------------------------------------
    def plan(self, origin: int) -> NDArray[np.int64]:
        """(T, L) query lengths of every table for an edge in ``origin``: levels(origin, r(t))."""
        plan = self._plans.get(origin)
        if plan is None:
            if not 0 <= origin < self._levels.shape[0]:
                raise InvalidInputError(
                    f"origin region must be in 0..{self._levels.shape[0] - 1}, got {origin}"
                )
            regions = np.asarray(self.layout.table_region, dtype=np.int64)
            plan = np.ascontiguousarray(self._levels[origin][regions])
            self._plans[origin] = plan
        return plan

    def query_lengths(self, origin: int) -> NDArray[np.int64]:
        """Every length an edge in ``origin`` ever queries, ascending (hash the prompt at these)."""
        return np.unique(self.plan(origin))

    def match_keys(
        self, origin: int, lengths: NDArray[np.int64], keys: NDArray[np.uint64]
    ) -> Match:
        """Per-worker match for a prompt whose keys at ascending ``lengths`` are ``keys``.

        Lengths the prompt does not reach are simply absent; extra lengths are ignored.
        """
        lengths = np.asarray(lengths)
        keys = np.asarray(keys)
        if lengths.dtype != np.int64 or keys.dtype != np.uint64:
            lengths = lengths.astype(np.int64)
            keys = check_keys(keys)
        if lengths.ndim != 1 or lengths.shape != keys.shape:
            raise InvalidInputError(
                "lengths and keys must be 1-D of equal length, "
                f"got {lengths.shape} and {keys.shape}"
            )
        problem = _query_problem(lengths, keys)
        if problem == 1:
            raise InvalidInputError("lengths must be strictly ascending and positive")
        if problem == 2:
            raise InvalidInputError("keys must be < 2**63 (63-bit prefix keys), got a larger value")
        return self._match(origin, lengths, keys)

    def _match(self, origin: int, lengths: NDArray[np.int64], keys: NDArray[np.uint64]) -> Match:
        w = self.layout.n_workers
        matched = np.zeros(w, dtype=np.int64)
        tiers = np.zeros(w, dtype=np.uint8)
        _match_one(
            self.plan(origin),
            self.layout.field_workers,
            self.n_fields,
            self.present,
            self.n_shards,
            self._params,
            self._ptrs,
            lengths,
            keys,
            self.monotone,
            matched,
            tiers,
        )
        return Match(matched, tiers)

    def lookup_value(self, table: int, key: int) -> int:
        """Raw packed value for one key of one table (debugging, ``/debug/lookup``)."""
        vid = table * self.n_shards + key % self.n_shards
        return self.views[vid].lookup_one(key) if self.present[vid] else 0

    def view_bytes(self) -> int:
        """Bytes held by the served views (the keyless view's memory)."""
        total = 0
        for vid, v in enumerate(self.views):
            if self.present[vid]:
                a = v.arrays
                total += a.seeds.nbytes + a.values.nbytes + a.fps.nbytes + a.locator.nbytes
        return total
