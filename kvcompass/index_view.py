"""The keyless side of the index: every (table, shard) view an edge holds, and prompt matching.

Owns applying ``ShardPatch``es in order (per-shard sequence, epochs swapped on commit) and the
multi-level match: for an edge in region o and a prompt's keys at ascending lengths, the matched
length and tier of EVERY worker, querying toward region r only levels(o, r) and applying the
prefix-monotonicity rule (DESIGN §5: a worker matches level l only if it holds every shorter
level of the same query, so a lone false hit at a long level is ignored). It reads no files and
no Kafka: view arrays come from an allocator (in memory, or ``kvcompass.view_file``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

import numpy as np
from numba import njit
from numba.typed import List as TypedList
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.index import ShardPatch, check_keys
from kvcompass.layout import FIELD_BITS, FIELD_MASK, TableLayout
from kvcompass.ludo import LudoParams, LudoView, ViewArrays
from kvcompass.ludo.kernels import lookup_key

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


@njit(cache=True)
def _match_one(
    plan_levels: NDArray[np.int64],
    field_workers: NDArray[np.int64],
    n_fields: NDArray[np.int64],
    present: NDArray[np.bool_],
    n_shards: int,
    params: NDArray[np.uint64],
    seeds: TypedList,  # type: ignore[type-arg]
    values: TypedList,  # type: ignore[type-arg]
    fps: TypedList,  # type: ignore[type-arg]
    locators: TypedList,  # type: ignore[type-arg]
    q_lengths: NDArray[np.int64],
    q_keys: NDArray[np.uint64],
    monotone: bool,
    matched: NDArray[np.int64],
    tiers: NDArray[np.uint8],
) -> int:
    """Fill matched/tiers (pre-zeroed); return the number of table reads made."""
    n_tables, n_levels = plan_levels.shape
    alive = np.zeros(field_workers.shape[1], dtype=np.bool_)
    reads = 0
    nq = q_lengths.shape[0]
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
            v = lookup_key(params[vid], seeds[vid], values[vid], fps[vid], locators[vid], key)
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
        self._params = np.stack([v.params.to_array() for v in self.views])
        self._seeds = TypedList([v.arrays.seeds for v in self.views])
        self._values = TypedList([v.arrays.values for v in self.views])
        self._fps = TypedList([v.arrays.fps for v in self.views])
        self._locators = TypedList([v.arrays.locator for v in self.views])

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

    def apply(self, patch: ShardPatch) -> Offer:
        """Apply one patch if the sequencer allows; idempotent for repeated images of one seq."""
        decision = self.offer(patch)
        if decision is not Offer.APPLY:
            return decision
        self.last_seq[patch.shard] = patch.seq
        vid = patch.table * self.n_shards + patch.shard
        batch = patch.batch
        epoch = batch.params.epoch
        current = self.views[vid] if self.present[vid] else None
        if current is not None and epoch == current.params.epoch:
            current.apply(batch)
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
        self._rebuild_lists()

    def params_for(self, table: int, shard: int, epoch: int) -> LudoParams | None:
        """Params of a served or pending epoch (what a record reassembler needs on resume)."""
        vid = table * self.n_shards + shard
        for v in (self.views[vid] if self.present[vid] else None, self.pending.get(vid)):
            if v is not None and v.params.epoch == epoch:
                return v.params
        return None

    def apply_all(self, patches: Iterable[ShardPatch]) -> int:
        """Apply in order; return how many were applied."""
        return sum(self.apply(p) is Offer.APPLY for p in patches)

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
        lengths = np.asarray(lengths, dtype=np.int64)
        keys = check_keys(keys)
        if lengths.shape != keys.shape:
            raise InvalidInputError(
                f"lengths and keys must have the same shape, got {lengths.shape} and {keys.shape}"
            )
        if lengths.size > 1 and (np.diff(lengths) <= 0).any():
            raise InvalidInputError("lengths must be strictly ascending")
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
            self._seeds,
            self._values,
            self._fps,
            self._locators,
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
