"""The multi-level discovery index, maintenance side (architecture §5, paper §3.3–3.4).

Owns the index operations — register, set tier, evict, clear — for every table of one shard
(``ShardState``, the state of one maintenance unit) or of all shards in one process
(``DiscoveryIndex``: the simulator, the demo, offline replay). Each operation rewrites one
worker's 2-bit tier field in the value of every key it names and returns the patches it
produced, stamped with the shard's sequence number; it never talks to Kafka or to a view.

An op is ``(table, key, field, code)``: ``code`` 0 clears the field (evict), 1 VRAM, 2 DRAM.
Keys are routed to shards by ``key % n_shards``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.layout import FIELD_BITS, FIELD_MASK, TableLayout
from kvcompass.ludo import LudoTable, PatchBatch
from kvcompass.shards import shard_of, split_by_shard
from kvcompass.types import Tier

KEY_LIMIT = np.uint64(1 << 63)


@dataclass(frozen=True, slots=True)
class ShardPatch:
    """The images one table of one shard emitted for one batch of ops, with the shard's sequence.

    ``seq`` increases by one per ShardPatch of a shard, across its tables; every image of the batch
    carries the same ``seq`` on the wire.
    """

    table: int
    shard: int
    seq: int
    batch: PatchBatch


def check_keys(keys: NDArray[np.uint64] | NDArray[np.int64] | list[int]) -> NDArray[np.uint64]:
    """Validate 63-bit prefix keys (the boundary check; kernels trust their input)."""
    arr = np.asarray(keys)
    if arr.ndim != 1:
        raise InvalidInputError(f"keys must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.uint64)
    if arr.dtype.kind == "i":
        if (arr < 0).any():
            raise InvalidInputError("keys must be non-negative 63-bit integers, got a negative key")
        arr = arr.astype(np.uint64)
    elif arr.dtype != np.uint64:
        raise InvalidInputError(f"keys must be uint64 (or int64), got dtype {arr.dtype}")
    if (arr >= KEY_LIMIT).any():
        raise InvalidInputError("keys must be < 2**63 (63-bit prefix keys), got a larger value")
    return arr


_BAD_KEY, _BAD_SHARD, _BAD_TABLE, _BAD_CODE, _BAD_FIELD = 1, 2, 3, 4, 5


@njit(cache=True)
def _ops_problem(
    tables: NDArray[np.int64],
    keys: NDArray[np.uint64],
    fields: NDArray[np.int64],
    codes: NDArray[np.int64],
    widths: NDArray[np.int64],
    n_shards: int,
    shard: int,
) -> int:
    """First problem over all ops, in ``ShardState.apply``'s order of checks (0: none).

    One pass instead of a numpy reduction per rule: a window's apply is on the index path of
    every simulated 10 ms and of every pipeline batch.
    """
    n = keys.shape[0]
    for check in range(1, 6):
        for i in range(n):
            if check == _BAD_KEY and keys[i] >> np.uint64(63):
                return check
            if check == _BAD_SHARD and keys[i] % np.uint64(n_shards) != np.uint64(shard):
                return check
            if check == _BAD_TABLE and (tables[i] < 0 or tables[i] >= widths.shape[0]):
                return check
            if check == _BAD_CODE and (codes[i] < 0 or codes[i] > 2):
                return check
            if check == _BAD_FIELD and (fields[i] < 0 or fields[i] >= widths[tables[i]]):
                return check
    return 0


def _check_tier(tier: int) -> int:
    try:
        return int(Tier(int(tier)))
    except ValueError:
        raise InvalidInputError(
            f"tier must be 0 (none), 1 (VRAM) or 2 (DRAM), got {tier!r}"
        ) from None


class ShardState:
    """One maintenance unit: the sole writer of shard ``shard`` of every table (with keys).

    ``initial_capacity`` sizes each table; tables grow by themselves into new epochs. ``seq_start``
    lets a restarted unit continue its predecessor's sequence numbers.
    """

    def __init__(
        self,
        layout: TableLayout,
        shard: int,
        n_shards: int,
        *,
        fp_bits: int = 8,
        initial_capacity: int = 1 << 12,
        seed: int = 0,
        seq_start: int = 0,
    ) -> None:
        if not 0 <= shard < n_shards:
            raise InvalidInputError(f"shard must be in 0..{n_shards - 1}, got {shard}")
        self.layout = layout
        self.shard = shard
        self.n_shards = n_shards
        self.seq = seq_start
        self._widths = np.array([len(w) for w in layout.table_workers], dtype=np.int64)
        seeds = np.random.SeedSequence([seed, shard]).spawn(layout.n_tables)
        self.tables = [
            LudoTable(
                initial_capacity,
                value_bits=layout.table_value_bits[t],
                fp_bits=fp_bits,
                seed=int(seeds[t].generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)),
            )
            for t in range(layout.n_tables)
        ]

    def _stamp(self, table: int, batch: PatchBatch) -> ShardPatch:
        if batch.header and not batch.commit:
            # A locator rebuild changed the epoch's seeds: publish the whole epoch again so that,
            # after compaction, nothing of this epoch precedes its latest header (patch_stream).
            batch = self.tables[table].full_image()
        self.seq += 1
        return ShardPatch(table, self.shard, self.seq, batch)

    def apply(
        self,
        tables: NDArray[np.int64],
        keys: NDArray[np.uint64],
        fields: NDArray[np.int64],
        codes: NDArray[np.uint8],
    ) -> list[ShardPatch]:
        """Apply ops in order (per table); return one ShardPatch per table touched.

        Every key must belong to this shard. Validation happens here (one njit pass,
        ``_ops_problem``); the per-table updates then take LudoTable's unchecked path.
        """
        keys = np.asarray(keys)
        tables = np.asarray(tables, dtype=np.int64)
        fields = np.asarray(fields, dtype=np.int64)
        codes = np.asarray(codes)
        n = keys.shape[0] if keys.ndim == 1 else -1
        if not (tables.shape == fields.shape == codes.shape == (n,)):
            check_keys(keys)  # a 2-D key array gets the key checker's message
            raise InvalidInputError(
                f"tables, keys, fields, codes must have equal length; got {tables.shape}, "
                f"{keys.shape}, {fields.shape}, {codes.shape}"
            )
        if n == 0:
            return []
        if keys.dtype != np.uint64:
            keys = check_keys(keys)  # int64 keys: refuse negatives, convert
        problem = _ops_problem(
            tables, keys, fields, codes.astype(np.int64), self._widths, self.n_shards, self.shard
        )
        if problem:
            self._raise_ops_problem(problem)
        shift = (fields * FIELD_BITS).astype(np.uint64)
        clear = np.left_shift(np.uint64(FIELD_MASK), shift)
        setb = np.left_shift(codes.astype(np.uint64), shift)
        out: list[ShardPatch] = []
        # One stable sort groups the ops by table and keeps each table's ops in order.
        order = np.argsort(tables, kind="stable")
        sorted_tables = tables[order]
        cuts = np.flatnonzero(sorted_tables[1:] != sorted_tables[:-1]) + 1
        starts = [0, *cuts.tolist()]
        stops = [*cuts.tolist(), n]
        keys_o, clear_o, set_o = keys[order], clear[order], setb[order]
        for a, b in zip(starts, stops, strict=True):
            t = int(sorted_tables[a])
            # Validated above, and the layout fits every field in its table's value bits.
            batch = self.tables[t].update_unchecked(keys_o[a:b], clear_o[a:b], set_o[a:b])
            out.append(self._stamp(t, batch))
        return out

    def _raise_ops_problem(self, problem: int) -> None:
        if problem == _BAD_KEY:
            raise InvalidInputError("keys must be < 2**63 (63-bit prefix keys), got a larger value")
        if problem == _BAD_SHARD:
            raise InvalidInputError(f"every key must satisfy key % {self.n_shards} == {self.shard}")
        if problem == _BAD_TABLE:
            raise InvalidInputError(f"table ids must be in 0..{self.layout.n_tables - 1}")
        if problem == _BAD_CODE:
            raise InvalidInputError("tier codes must be 0 (none), 1 (VRAM) or 2 (DRAM)")
        raise InvalidInputError("a field is outside its table's worker count")

    def apply_field(
        self, table: int, field_: int, code: int, keys: NDArray[np.uint64]
    ) -> ShardPatch | None:
        """One worker's field set to ``code`` for keys already checked to be in this shard.

        The per-event fast path (one worker, one tier): no per-op arrays to validate.
        """
        if keys.size == 0:
            return None
        shift = FIELD_BITS * field_
        n = keys.size
        clear = np.full(n, FIELD_MASK << shift, dtype=np.uint64)
        setb = np.full(n, code << shift, dtype=np.uint64)
        return self._stamp(table, self.tables[table].update(keys, clear, setb))

    def clear_field(self, table: int, field_: int) -> ShardPatch:
        """A worker dropped its whole cache (SGLang ``AllBlocksCleared``)."""
        mask = FIELD_MASK << (FIELD_BITS * field_)
        return self._stamp(table, self.tables[table].clear_bits(mask))

    def full_images(self) -> list[ShardPatch]:
        """Every table's complete image: what a rebuilt unit republishes as a fresh epoch."""
        return [self._stamp(t, tab.full_image()) for t, tab in enumerate(self.tables)]

    def entries(self) -> int:
        return sum(len(t) for t in self.tables)


class DiscoveryIndex:
    """All shards of the index in one process: the simulator, the demo, replay and tests.

    Operations take a global worker id and the prefix keys (already computed at the worker
    region's registration lengths by ``kvcompass.keys``) and return the patches produced.
    """

    def __init__(
        self,
        layout: TableLayout,
        *,
        n_shards: int = 4,
        fp_bits: int = 8,
        initial_capacity: int = 1 << 12,
        seed: int = 0,
    ) -> None:
        if n_shards < 1:
            raise InvalidInputError(f"n_shards must be >= 1, got {n_shards}")
        self.layout = layout
        self.n_shards = n_shards
        self.fp_bits = fp_bits
        self.shards = [
            ShardState(
                layout, s, n_shards, fp_bits=fp_bits, initial_capacity=initial_capacity, seed=seed
            )
            for s in range(n_shards)
        ]

    def _op(self, worker: int, keys: NDArray[np.uint64], code: int) -> list[ShardPatch]:
        table, field_ = self.layout.field_of(worker)
        keys = check_keys(keys)
        out: list[ShardPatch] = []
        if self.n_shards == 1:
            p = self.shards[0].apply_field(table, field_, code, keys)
            return [p] if p is not None else out
        order, bounds = split_by_shard(keys, self.n_shards)  # each shard's ops in order
        for s in range(self.n_shards):
            lo, hi = int(bounds[s]), int(bounds[s + 1])
            if lo < hi:
                p = self.shards[s].apply_field(table, field_, code, keys[order[lo:hi]])
                if p is not None:
                    out.append(p)
        return out

    def register(
        self, worker: int, keys: NDArray[np.uint64], tier: int = Tier.VRAM
    ) -> list[ShardPatch]:
        """The worker now holds these prefixes in ``tier`` (insert or rewrite its field)."""
        code = _check_tier(tier)
        if code == Tier.NONE:
            raise InvalidInputError("register needs tier VRAM or DRAM; use evict to remove")
        return self._op(worker, keys, code)

    def set_tier(self, worker: int, keys: NDArray[np.uint64], tier: int) -> list[ShardPatch]:
        """VRAM <-> DRAM move (same as register: the field is rewritten in place)."""
        return self.register(worker, keys, tier)

    def evict(self, worker: int, keys: NDArray[np.uint64]) -> list[ShardPatch]:
        """The worker no longer holds these prefixes (its field goes to 00)."""
        return self._op(worker, keys, int(Tier.NONE))

    def clear(self, worker: int) -> list[ShardPatch]:
        """The worker dropped everything."""
        table, field_ = self.layout.field_of(worker)
        return [s.clear_field(table, field_) for s in self.shards]

    def holders(self, key: int) -> dict[int, Tier]:
        """Exact (keyed) holders of one key — the maintenance truth the views must reproduce."""
        k = check_keys(np.array([key], dtype=np.uint64))
        shard = self.shards[int(shard_of(k, self.n_shards)[0])]
        out: dict[int, Tier] = {}
        for t, tab in enumerate(shard.tables):
            v = int(tab.get(k)[0])
            for f, w in enumerate(self.layout.table_workers[t]):
                code = (v >> (FIELD_BITS * f)) & FIELD_MASK
                if code:
                    out[w] = Tier(code)
        return out

    def full_images(self) -> list[ShardPatch]:
        return [p for s in self.shards for p in s.full_images()]

    def entries(self) -> int:
        return sum(s.entries() for s in self.shards)
