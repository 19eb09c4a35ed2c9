"""Offline replay: same index as the core fed directly; key history; export file round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvcompass.types import Tier
from pipeline.codec import AvroCodec
from pipeline.export import export_events, read_export
from pipeline.registry import InProcessRegistry
from pipeline.replay import SourceRecord, new_replay
from tests.unit.pipeline._pipeline_fixtures import DEP, event

CODEC = AvroCodec(InProcessRegistry(), validate=True)


def _events() -> list[dict]:
    keys = [11, 12, 13]
    lengths = [16, 32, 48]
    reg = {"registration_keys": keys, "registration_lengths": lengths, "token_ids": None}
    return [
        event(1, np.zeros(48, np.int32), **reg),
        event(2, np.zeros(48, np.int32), **reg),
        event(1, np.zeros(48, np.int32), op="TIER_MOVED", tier="DRAM", **reg),
        event(2, np.zeros(48, np.int32), op="REMOVED", tier="NONE",
              **{**reg, "registration_keys": [12], "registration_lengths": [32]}),
    ]  # fmt: skip


def test_replay_builds_holders_and_traces_a_key__register_move_evict() -> None:
    rep = new_replay(DEP, 2, trace=[12])
    for i, ev in enumerate(_events()):
        rep.feed(SourceRecord(0, i, CODEC.encode("KvEvent", ev)), CODEC)
    rep.feed(SourceRecord(0, 9, b"junk"), CODEC)
    assert (rep.events, rep.invalid, rep.key_ops) == (4, 1, 10)
    assert rep.holders(12) == {1: int(Tier.DRAM)}
    assert rep.holders(11) == {1: int(Tier.DRAM), 2: int(Tier.VRAM)}
    assert [(t.offset, t.worker_id, t.op) for t in rep.traced[12]] == [
        (0, 1, "STORED"), (1, 2, "STORED"), (2, 1, "TIER_MOVED"), (3, 2, "REMOVED")
    ]  # fmt: skip


def test_export_file_replays_to_the_same_index__ocf_round_trip(tmp_path: Path) -> None:
    values = [CODEC.encode("KvEvent", ev) for ev in _events()] + [b"junk"]
    path = tmp_path / "ev.avro"
    assert export_events((SourceRecord(0, i, v) for i, v in enumerate(values)), path, CODEC) == 4
    a, b = new_replay(DEP, 2), new_replay(DEP, 2)
    for i, v in enumerate(values):
        a.feed(SourceRecord(0, i, v), CODEC)
    for rec in read_export(path):
        b.feed(rec, CODEC)
    assert b.events == 4 and b.index.entries() == a.index.entries()
    assert all(a.holders(k) == b.holders(k) for k in (11, 12, 13))
