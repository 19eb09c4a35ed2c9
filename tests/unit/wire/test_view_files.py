"""Memory-mapped view files: reopen gives identical lookups; damaged files raise ViewFileError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvcompass.errors import ViewFileError
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.layout import TableLayout
from kvcompass.ludo import LudoView
from wire.view_files import ViewStore, create, open_view

LAYOUT = TableLayout.for_regions([4, 2])
LEVELS = np.tile(np.array([128, 256, 512], dtype=np.int64), (2, 2, 1))


def _filled(tmp_path: Path) -> tuple[DiscoveryIndex, IndexView, ViewStore, np.ndarray]:
    index = DiscoveryIndex(LAYOUT, n_shards=2, initial_capacity=16)
    store = ViewStore(tmp_path)
    view = IndexView(LAYOUT, LEVELS, 2, allocator=store.allocate, on_params=store.adopt)
    view.apply_all(index.full_images())
    rng = np.random.default_rng(3)
    keys = rng.integers(0, 2**63, size=2000, dtype=np.uint64)
    for i in range(0, keys.size, 100):
        view.apply_all(index.register(int(rng.integers(0, 6)), keys[i : i + 100]))
    for s in range(2):
        store.set_progress(s, int(view.last_seq[s]), 1000 + s)
    store.flush()
    return index, view, store, keys


def test_reopened_files_answer_identically__after_growth(tmp_path: Path) -> None:
    _, view, store, keys = _filled(tmp_path)
    for p in store.superseded():
        p.unlink()
    restored = ViewStore(tmp_path).restore()
    assert len(restored) == LAYOUT.n_tables * 2
    view2 = IndexView(LAYOUT, LEVELS, 2)
    for vf in restored:
        view2.install(vf.table, vf.shard, LudoView(vf.params, vf.arrays), vf.last_seq)
        assert vf.consumer_offset == 1000 + vf.shard
    for k in keys[::5].tolist():
        for t in range(LAYOUT.n_tables):
            assert view2.lookup_value(t, k) == view.lookup_value(t, k)
    assert (view2.last_seq == view.last_seq).all()


def test_uncommitted_epoch_is_not_restored__crash_mid_epoch(tmp_path: Path) -> None:
    index = DiscoveryIndex(LAYOUT, n_shards=1, initial_capacity=16)
    params = index.shards[0].tables[0].params
    create(tmp_path, 0, 0, params)  # never committed
    assert ViewStore(tmp_path).restore() == []


def test_damaged_files_raise_precise_errors__magic_version_truncation(tmp_path: Path) -> None:
    index = DiscoveryIndex(LAYOUT, n_shards=1, initial_capacity=16)
    vf = create(tmp_path, 0, 0, index.shards[0].tables[0].params)
    vf.flush()
    good = vf.path.read_bytes()
    bad_magic = tmp_path / "magic.kvview"
    bad_magic.write_bytes(b"XXXXXXXX" + good[8:])
    with pytest.raises(ViewFileError, match="bad magic"):
        open_view(bad_magic)
    bad_version = tmp_path / "version.kvview"
    bad_version.write_bytes(good[:8] + (99).to_bytes(4, "little") + good[12:])
    with pytest.raises(ViewFileError, match="format version 99"):
        open_view(bad_version)
    truncated = tmp_path / "short.kvview"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(ViewFileError, match="truncated"):
        open_view(truncated)
    tiny = tmp_path / "tiny.kvview"
    tiny.write_bytes(good[:100])
    with pytest.raises(ViewFileError, match="truncated"):
        open_view(tiny)
