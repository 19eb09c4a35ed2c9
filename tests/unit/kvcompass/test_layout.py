from __future__ import annotations

import pytest

from kvcompass.errors import ConfigError, UnknownWorkerError
from kvcompass.layout import TableLayout


def test_small_regions_get_one_32bit_table__testbed() -> None:
    layout = TableLayout.for_regions([8, 2, 4])
    assert layout.table_value_bits == (32, 32, 32)
    assert layout.table_region == (0, 1, 2)
    assert layout.field_of(9) == (1, 1)


def test_large_region_uses_64bit_tables__30_and_40_workers() -> None:
    assert TableLayout.for_regions([30]).table_value_bits == (64,)
    layout = TableLayout.for_regions([40, 3])
    assert layout.table_value_bits == (64, 64, 32)
    assert sorted(w for t in layout.table_workers[:2] for w in t) == list(range(40))


def test_every_worker_has_exactly_one_field__random_sizes() -> None:
    layout = TableLayout.for_regions([17, 1, 33, 64])
    seen = {(int(t), int(f)) for t, f in zip(layout.worker_table, layout.worker_field, strict=True)}
    assert len(seen) == layout.n_workers == 115


def test_unknown_worker_is_rejected__out_of_range() -> None:
    with pytest.raises(UnknownWorkerError, match="not in this deployment"):
        TableLayout.for_regions([2]).field_of(5)


def test_region_without_workers_is_rejected__zero() -> None:
    with pytest.raises(ConfigError, match="at least 1"):
        TableLayout.for_regions([2, 0])
