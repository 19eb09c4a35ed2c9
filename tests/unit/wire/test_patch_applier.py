"""PatchApplier (no broker): records from a maintenance unit rebuild its view; files resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from kvcompass.index_view import IndexView
from kvcompass.maintenance import MaintenanceUnit, PatchScan
from kvcompass.patch_stream import explode
from tests.kv_event_fixtures import LAYOUT, LEVELS
from tests.unit.kvcompass.test_maintenance import _batches
from wire.codec import AvroCodec
from wire.patch_applier import PatchApplier
from wire.patches import decode_value, encode_records
from wire.registry import InProcessRegistry
from wire.view_files import ViewStore

N = 2
REG = InProcessRegistry()
SID = REG.writer_id("IndexPatch")


def _log(seed: int) -> tuple[list[MaintenanceUnit], list[tuple[int, bytes, bytes | None]]]:
    """Per partition: (key, value) records in offset order, from two units."""
    rng = np.random.default_rng(seed)
    units, log = [], []
    for s in range(N):
        unit = MaintenanceUnit(LAYOUT, s, N, initial_capacity=16)
        steps = [unit.recover([], PatchScan(), 0)]
        for i, b in enumerate(_batches(rng, 300, s)):
            steps.append(unit.apply([b], i))
        for st in steps:
            for p in st.patches:
                for k, v in encode_records(SID, explode(p), st.source_offset, 1):
                    log.append((s, k, v))
            for key in st.retired:
                from wire.codec import encode_patch_key

                log.append((s, encode_patch_key(*key), None))
        units.append(unit)
    return units, log


def _applier(store: ViewStore | None = None) -> PatchApplier:
    if store is None:
        view = IndexView(LAYOUT, LEVELS.matrix, N)
    else:
        view = IndexView(LAYOUT, LEVELS.matrix, N, allocator=store.allocate, on_params=store.adopt)
    return PatchApplier(view, store, AvroCodec(REG), SID)


def _feed(app: PatchApplier, log: list, start: dict[int, int] | None = None) -> None:
    offsets: dict[int, int] = {}
    for s, _, v in log:
        off = offsets.get(s, 0)
        offsets[s] = off + 1
        if start is None or off >= start.get(s, 0):
            app.feed(s, off, v)
    app.idle()


def _assert_matches(app: PatchApplier, units: list[MaintenanceUnit]) -> None:
    for unit in units:
        for t in range(LAYOUT.n_tables):
            keys, vals = unit.state.tables[t].items()
            assert [app.view.lookup_value(t, int(k)) for k in keys] == vals.tolist()


def test_applier_rebuilds_unit_views__full_log_twice() -> None:
    units, log = _log(1)
    app = _applier()
    _feed(app, log)
    _assert_matches(app, units)
    applied = app.stats.applied
    _feed(app, log)  # re-delivery of everything: only the last seq of each shard re-applies
    _assert_matches(app, units)
    assert app.stats.stale > 0 and app.stats.applied <= applied + N * LAYOUT.n_tables


def test_applier_rebuilds_from_compacted_log__compaction() -> None:
    units, log = _log(2)
    latest: dict[bytes, int] = {}
    for i, (_, k, _) in enumerate(log):
        latest[k] = i
    compacted = [r for i, r in enumerate(log) if latest[r[1]] == i and r[2] is not None]
    app = _applier()
    _feed(app, compacted)
    _assert_matches(app, units)


def test_restart_resumes_from_view_files__stored_offsets(tmp_path: Path) -> None:
    units, log = _log(3)
    half = len(log) // 2
    first = _applier(ViewStore(tmp_path))
    _feed(first, log[:half])
    first.save()
    first.store.flush()  # type: ignore[union-attr]
    second = _applier(ViewStore(tmp_path))
    resume = second.restore()
    assert set(resume) == set(range(N))
    _feed(second, log, start=resume)
    second.save()
    _assert_matches(second, units)


def test_undecodable_records_are_counted_and_skipped__garbage_between_batches() -> None:
    units, log = _log(4)
    app = _applier()
    offsets: dict[int, int] = {}
    for i, (s, _, v) in enumerate(log):
        off = offsets.get(s, 0)
        offsets[s] = off + 2
        app.feed(s, off, v)
        if i % 97 == 0:
            app.feed(s, off + 1, b"\x00\x00\x00\x00\x03\xff")  # a record between batches
    app.idle()
    _assert_matches(app, units)
    assert app.stats.undecodable == len(range(0, len(log), 97))


def test_a_patch_no_view_can_hold_is_skipped__bootstrap_goes_on() -> None:
    """Issue 35 item 3: a valid IndexPatch record for table 99 (outside the layout), or on the
    wrong partition, in the compacted topic made every fresh edge die at bootstrap. Now it is
    skipped, counted and named, and everything around it is applied."""
    units, log = _log(3)
    s0 = [i for i, r in enumerate(log) if r[0] == 0]
    rec = next(r for r in log if r[0] == 0 and r[2] is not None)
    d = decode_value(SID, rec[2] or b"").record
    forged = [
        (0, rec[1], encode_records(SID, [dataclasses.replace(d, table=99)], 0, 1)[0][1]),
        (
            0,
            rec[1],
            encode_records(SID, [dataclasses.replace(d, shard=1)], 0, 1)[0][1],
        ),  # shard 1 on p0
    ]
    poisoned = log[: s0[5]] + forged + log[s0[5] :]
    app = _applier()
    _feed(app, poisoned)  # never raises
    _assert_matches(app, units)
    assert len(app.refused) == 2 and all(p == 0 for p, _, _ in app.refused)
    assert "table 99" in app.refused[0][2]
    assert app.stats.undecodable >= 2
