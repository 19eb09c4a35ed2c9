"""Which index table and 2-bit field each worker owns (architecture §5).

A table covers one region's workers in groups of up to 16 (32-bit values) or up to 32 (64-bit
values); a value packs one 2-bit tier field per worker of its table. A region of at most 16
workers gets one 32-bit table; a larger region gets ceil(n / 32) 64-bit tables with its workers
spread evenly (the paper's 30-worker US region uses one 64-bit table). This module is pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import ConfigError, UnknownWorkerError

FIELD_BITS = 2
FIELD_MASK = 0b11


@dataclass(frozen=True, slots=True)
class TableLayout:
    """Tables of the index and the (table, field) of every worker.

    ``table_workers[t]`` lists the global worker ids of table t in field order.
    """

    table_region: tuple[int, ...]
    table_value_bits: tuple[int, ...]
    table_workers: tuple[tuple[int, ...], ...]
    n_workers: int
    worker_table: NDArray[np.int64] = field(init=False, repr=False, compare=False)
    worker_field: NDArray[np.int64] = field(init=False, repr=False, compare=False)
    field_workers: NDArray[np.int64] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n_tables = len(self.table_region)
        if not (len(self.table_value_bits) == len(self.table_workers) == n_tables):
            raise ConfigError(
                "table_region, table_value_bits and table_workers must have one entry per table; "
                f"got {n_tables}, {len(self.table_value_bits)}, {len(self.table_workers)}"
            )
        worker_table = np.full(self.n_workers, -1, dtype=np.int64)
        worker_field = np.full(self.n_workers, -1, dtype=np.int64)
        width = max((len(ws) for ws in self.table_workers), default=0)
        field_workers = np.full((n_tables, max(width, 1)), -1, dtype=np.int64)
        for t, (bits, workers) in enumerate(
            zip(self.table_value_bits, self.table_workers, strict=True)
        ):
            if bits not in (32, 64):
                raise ConfigError(f"table {t}: value bits must be 32 or 64, got {bits}")
            if not 0 < len(workers) <= bits // FIELD_BITS:
                raise ConfigError(
                    f"table {t}: {bits}-bit values hold 1..{bits // FIELD_BITS} workers, "
                    f"got {len(workers)}"
                )
            for f, w in enumerate(workers):
                if not 0 <= w < self.n_workers or worker_table[w] != -1:
                    raise ConfigError(f"table {t}: worker {w} out of range or in two tables")
                worker_table[w] = t
                worker_field[w] = f
                field_workers[t, f] = w
        if self.n_workers and (worker_table < 0).any():
            missing = np.flatnonzero(worker_table < 0).tolist()
            raise ConfigError(f"workers {missing} belong to no table")
        object.__setattr__(self, "worker_table", worker_table)
        object.__setattr__(self, "worker_field", worker_field)
        object.__setattr__(self, "field_workers", field_workers)

    @classmethod
    def for_regions(
        cls, workers_per_region: list[int] | tuple[int, ...], *, max_fields_32: int = 16
    ) -> TableLayout:
        """Tables for workers numbered region by region (the deployment's numbering)."""
        regions: list[int] = []
        bits: list[int] = []
        groups: list[tuple[int, ...]] = []
        first = 0
        for r, n in enumerate(workers_per_region):
            if n <= 0:
                raise ConfigError(f"region {r} has {n} workers; expected at least 1")
            ids = list(range(first, first + n))
            first += n
            if n <= max_fields_32:
                parts = [ids]
                width = 32
            else:
                n_parts = -(-n // 32)
                parts = [ids[i::n_parts] for i in range(n_parts)]
                parts = [sorted(p) for p in parts]
                width = 64
            for p in parts:
                regions.append(r)
                bits.append(width)
                groups.append(tuple(p))
        return cls(tuple(regions), tuple(bits), tuple(groups), first)

    @property
    def n_tables(self) -> int:
        return len(self.table_region)

    def field_of(self, worker: int) -> tuple[int, int]:
        """(table, field) of a worker; UnknownWorkerError if it is not in the layout."""
        if not 0 <= worker < self.n_workers:
            raise UnknownWorkerError(
                f"worker {worker} is not in this deployment (expected 0..{self.n_workers - 1})"
            )
        return int(self.worker_table[worker]), int(self.worker_field[worker])
