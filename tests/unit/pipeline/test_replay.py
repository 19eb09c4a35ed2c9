"""Offline replay: same index as the core fed directly; key history; export file round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from kvcompass.types import Tier
from pipeline.export import export_events, read_export
from pipeline.replay import SourceRecord, new_replay
from tests.kv_event_fixtures import DEP, event
from wire.codec import AvroCodec, int32_key
from wire.registry import InProcessRegistry

CODEC = AvroCodec(InProcessRegistry(), validate=True)


def _events() -> list[dict]:
    keys = [11, 12, 13]
    lengths = [16, 32, 48]
    reg = {"registration_keys": keys, "registration_lengths": lengths, "token_ids": None}
    return [
        event(1, np.zeros(48, np.int32), engine_seq=1, **reg),
        event(2, np.zeros(48, np.int32), engine_seq=1, **reg),
        event(1, np.zeros(48, np.int32), op="TIER_MOVED", tier="DRAM", engine_seq=2, **reg),
        event(2, np.zeros(48, np.int32), op="REMOVED", tier="NONE", engine_seq=2,
              **{**reg, "registration_keys": [12], "registration_lengths": [32]}),
    ]  # fmt: skip


def _rec(i: int, ev: dict, partition: int = 0) -> SourceRecord:
    return SourceRecord(partition, i, CODEC.encode("KvEvent", ev), key=int32_key(ev["worker_id"]))


def test_replay_builds_holders_and_traces_a_key__register_move_evict() -> None:
    rep = new_replay(DEP, 2, trace=[12])
    for i, ev in enumerate(_events()):
        rep.feed(_rec(i, ev), CODEC)
    rep.feed(SourceRecord(0, 9, b"junk", key=b"\x00\x00\x00\x01"), CODEC)
    assert (rep.events, rep.invalid, rep.key_ops) == (4, 1, 10)
    assert rep.holders(12) == {1: int(Tier.DRAM)}
    assert rep.holders(11) == {1: int(Tier.DRAM), 2: int(Tier.VRAM)}
    assert [(t.offset, t.worker_id, t.op) for t in rep.traced[12]] == [
        (0, 1, "STORED"), (1, 2, "STORED"), (2, 1, "TIER_MOVED"), (3, 2, "REMOVED")
    ]  # fmt: skip


def test_export_file_replays_to_the_same_index__ocf_round_trip(tmp_path: Path) -> None:
    records = [_rec(i, ev) for i, ev in enumerate(_events())]
    records.append(SourceRecord(0, 4, b"junk", key=b"k"))
    stray = _rec(5, event(3, np.zeros(16, np.int32), engine_seq=9))
    records.append(SourceRecord(0, 5, stray.value, key=int32_key(4)))  # not worker 3's key
    path = tmp_path / "ev.avro"
    assert export_events(iter(records), path, CODEC) == 4
    a, b = new_replay(DEP, 2), new_replay(DEP, 2)
    for r in records:
        a.feed(r, CODEC)
    for rec in read_export(path):
        b.feed(rec, CODEC)
    assert b.events == 4 and b.index.entries() == a.index.entries()
    assert all(a.holders(k) == b.holders(k) for k in (11, 12, 13))


def test_replay_skips_wrong_keys_and_late_events__as_the_live_pipeline() -> None:
    rep = new_replay(DEP, 2)
    first, second = _events()[0], _events()[2]  # worker 1: STORED (seq 1), TIER_MOVED (seq 2)
    rep.feed(SourceRecord(0, 0, CODEC.encode("KvEvent", first), key=int32_key(2)), CODEC)
    assert (rep.events, rep.invalid) == (0, 1)  # another worker's key: never applied
    rep.feed(_rec(1, second), CODEC)
    rep.feed(_rec(2, first), CODEC)  # seq 1 after seq 2: late
    assert (rep.events, rep.late) == (1, 1)
    assert rep.holders(12) == {1: int(Tier.DRAM)}  # the late STORED (VRAM) did not win
    rep.feed(_rec(1, second), CODEC)  # offset 1 again: a re-delivery
    assert (rep.events, rep.redelivered) == (1, 1)


def test_late_events_are_dead_lettered_live__replay_in_the_same_order_agrees() -> None:
    """One worker's events split over two partitions (a producer choosing partitions itself):
    whichever is read second is late. The live shell dead-letters them with the reason (never
    applies them), and a replay reading in the same order applies exactly the same events."""
    import asyncio

    from kvcompass.event_order import EventOrder
    from pipeline.reads import Raw
    from tests.unit.pipeline.test_fuzz import _sent, _shell
    from wire.index_ops import decode_op_batch

    evs = [event(1, np.zeros(16, np.int32), op="STORED" if j % 2 == 0 else "REMOVED",
                 tier="VRAM" if j % 2 == 0 else "NONE", engine_seq=j + 1,
                 registration_keys=[100 + j // 2], registration_lengths=[16], token_ids=None)
           for j in range(20)]  # fmt: skip
    read = [(i, e) for i, e in enumerate(evs) if i % 2 == 0]
    read += [(i, e) for i, e in enumerate(evs) if i % 2 == 1]  # partition 0, then 1
    shell, fake = _shell()
    shell.order = EventOrder()
    topic = shell.topics.kv_events
    raws = [Raw(topic, i % 2, i // 2, int32_key(1), CODEC.encode("KvEvent", e))
            for i, e in read]  # fmt: skip
    asyncio.run(shell.rechunk(raws))
    live = sorted(
        b.source.engine_seq
        for v in _sent(fake, shell.topics.index_ops)
        for b in decode_op_batch(CODEC.decode(v)[1])
    )
    dead = [CODEC.decode(v)[1] for v in _sent(fake, shell.topics.dead_letters)]
    rep = new_replay(DEP, 2)
    for i, e in read:
        rep.feed(_rec(i // 2, e, partition=i % 2), CODEC)
    assert live == [*range(1, 20, 2), 20] and rep.events == 11  # the same eleven applied
    assert rep.late == len(dead) == 9
    assert all(d["reason"].startswith("engine_seq: expected > 19") for d in dead)
