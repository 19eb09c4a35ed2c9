"""RankBridge decisions: in-order apply, duplicates, gaps -> replay, lost gaps -> CLEARED and
degraded until re-learned, engine restart; records fit the KvEvent Avro schema."""

from __future__ import annotations

import numpy as np

from kvcompass.keys import KeyNamespace, prompt_key
from wire.codec import AvroCodec
from wire.registry import InProcessRegistry
from workers.block_table import Op
from workers.bridge import Apply, NeedReplay, RankBridge, engine_seq
from workers.protocol import Batch, Rejected, Removed, Stored

NS = KeyNamespace("test-model")
TOKS = tuple(range(10, 26))


def _bridge() -> RankBridge:
    return RankBridge(3, 1, NS, [8, 16], relearn_batches=2)


def _store(seq: int, parent: int | None = None, first: int = 0, n: int = 2) -> Batch:
    toks = TOKS[first * 4 : (first + n) * 4]
    hashes = tuple(range(first + 1, first + n + 1))
    return Batch(seq, 1000.0 + seq, None, (Stored(hashes, parent, toks, 4, "GPU"),))


def test_in_order_batches_produce_stored_records__avro_valid() -> None:
    b = _bridge()
    (cleared,) = b.start(5)
    step = b.offer(_store(0))
    assert isinstance(step, Apply)
    (rec,) = step.records
    assert rec["op"] == "STORED" and rec["tier"] == "VRAM" and rec["worker_id"] == 3
    assert rec["registration_lengths"] == [8]
    assert rec["registration_keys"] == [prompt_key(NS, np.array(TOKS), 8)]
    assert rec["token_ids"] is None and rec["block_hashes"] == []  # keys only: all rechunk reads
    codec = AvroCodec(InProcessRegistry(), validate=True)
    for r in (cleared, rec):
        assert codec.decode(codec.encode("KvEvent", r))[1]["op"] == r["op"]


def test_salted_store__record_keyed_in_the_salts_sharing_group() -> None:
    b = _bridge()
    b.start(5)
    salted = Stored((1, 2), None, TOKS[:8], 4, "GPU", cache_salt="acme")
    step = b.offer(Batch(0, 1000.0, None, (salted,)))
    assert isinstance(step, Apply)
    (rec,) = step.records
    acme = KeyNamespace("test-model", "", "acme")
    assert rec["sharing_group"] == "acme"
    assert rec["registration_keys"] == [prompt_key(acme, np.array(TOKS), 8)]
    assert rec["registration_keys"] != [prompt_key(NS, np.array(TOKS), 8)]


def test_duplicate_is_skipped__seq_below_expected() -> None:
    b = _bridge()
    b.offer(_store(0))
    b.offer(_store(1, 2, first=2))
    step = b.offer(_store(1, 2, first=2))
    assert step == Apply([]) and b.stats.duplicates == 1


def test_gap_asks_replay_then_recovers__replayed_batches_applied_once() -> None:
    b = _bridge()
    b.offer(_store(0))
    live = _store(2, 4, first=4, n=0)
    assert b.offer(live) == NeedReplay(1)
    recs = b.on_replay(1, [_store(0), _store(1, 2, first=2), live], now_ms=9)
    assert [r["registration_lengths"] for r in recs] == [[16]]
    assert b.stats.gaps_recovered == 1 and not b.stats.degraded
    assert isinstance(b.offer(live), Apply) and b.expected == 3


def test_gap_older_than_buffer_clears_and_degrades__until_clean_batches() -> None:
    b = _bridge()
    b.offer(_store(0))
    recs = b.on_replay(1, [_store(5, 2, first=2)], now_ms=9)
    assert [r["op"] for r in recs] == ["CLEARED"]  # the child store is an orphan now
    assert b.stats.degraded and b.stats.gaps_lost == 1 and b.table.stats.orphan_blocks == 2
    step = b.offer(_store(6))
    assert isinstance(step, Apply) and step.records[0]["op"] == "STORED"
    assert b.stats.degraded  # one clean batch is not enough
    b.offer(Batch(7, 1007.0, None, (Removed((99,), "GPU"),)))  # unknown block: not clean
    b.offer(_store(8, 2, first=2))
    assert b.stats.degraded
    b.offer(_store(9, 4, first=4, n=1))
    assert not b.stats.degraded


def test_engine_restart_clears__seq_zero_after_progress() -> None:
    b = _bridge()
    b.offer(_store(0))
    b.offer(Batch(1, 1001.0, None, (Removed((1, 2), "GPU"),)))
    step = b.offer(_store(0))
    assert isinstance(step, Apply)
    assert [r["op"] for r in step.records] == ["CLEARED", "STORED"]
    assert b.stats.engine_restarts == 1


def test_malformed_frame_asks_replay__good_copy_applied_not_degraded() -> None:
    b = _bridge()
    b.offer(_store(0))
    assert b.malformed(1) == NeedReplay(1) and b.stats.malformed == 1
    recs = b.on_replay(1, [_store(1, 2, first=2)], now_ms=9)
    assert [r["op"] for r in recs] == ["STORED"] and b.expected == 2
    assert not b.stats.degraded and b.stats.gaps_lost == 0


def test_malformed_frame_without_seq_asks_nothing__next_batch_shows_the_gap() -> None:
    b = _bridge()
    b.offer(_store(0))
    assert b.malformed(None) is None and b.expected == 1
    assert b.offer(_store(2, 4, first=4, n=0)) == NeedReplay(1)


def test_replay_with_a_hole_in_the_middle_is_lost__clears_after_the_run() -> None:
    b = _bridge()
    b.offer(_store(0))
    recs = b.on_replay(1, [_store(1, 2, first=2), _store(3, 4, first=4, n=0)], now_ms=9)
    assert [r["op"] for r in recs] == ["STORED", "CLEARED"]
    assert b.stats.degraded and b.stats.gaps_lost == 1 and b.expected == 4


def test_rejected_events_are_queued_once__batch_still_applied() -> None:
    b = _bridge()
    bad = Rejected(1, "event 1: Expected `int`, got `str`", b"\xa1x")
    batch = Batch(0, 1000.0, None, _store(0).events, (bad,))
    step = b.offer(batch)
    assert isinstance(step, Apply) and [r["op"] for r in step.records] == ["STORED"]
    assert b.take_rejected() == [(0, bad)] and b.take_rejected() == []
    assert b.stats.rejected_events == 1


def test_engine_seq_is_increasing_and_unique__within_and_across_batches() -> None:
    seqs = [engine_seq(1_796_000_000_000 + t, s, i) for t, s in ((0, 5), (1, 6)) for i in range(3)]
    assert seqs == sorted(set(seqs)) and max(seqs) < 2**63


def test_engine_restart_missing_seq_zero_asks_replay_from_zero__newer_timestamp() -> None:
    b = _bridge()
    for seq in range(3):
        b.offer(_store(seq) if seq == 0 else Batch(seq, 1000.0 + seq, None, ()))
    restarted = Batch(1, 5000.0, None, ())
    assert b.offer(restarted) == NeedReplay(0)
    first = Batch(0, 4999.0, None, _store(0).events)
    recs = b.on_replay(0, [first, restarted], now_ms=9)
    assert [r["op"] for r in recs] == ["CLEARED", "STORED"]
    assert b.stats.engine_restarts == 1 and not b.stats.degraded and b.expected == 2


def test_emitted_engine_seq_strictly_increases__clock_behind_after_cleared() -> None:
    """A lost gap's CLEARED carries the bridge's clock (now); the replayed batches after it carry
    older engine timestamps: their records must still come after it (the pipeline applies a
    worker's events only in increasing engine_seq)."""
    b = RankBridge(0, 0, KeyNamespace("m"), [16])
    first = b.start(2_000_000)  # CLEARED at t = 2,000,000 ms
    older = b._base(Op.STORED, engine_seq(1_000_000, 3, 0), 1_000_000)  # an older batch
    again = b._base(Op.STORED, engine_seq(1_000_000, 3, 1), 1_000_000)
    seqs = [first[0]["engine_seq"], older["engine_seq"], again["engine_seq"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
