"""Rechunk: events become per-shard op batches with the right keys, field, op and tier."""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.rechunk import InvalidEvent, OpKind, by_shard
from kvcompass.types import Tier
from tests.kv_event_fixtures import LAYOUT, LEVELS, MODEL, event, rechunker, source
from wire.codec import AvroCodec
from wire.index_ops import decode_op_batch, encode_op_batch
from wire.registry import InProcessRegistry


def _tokens(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 50_000, n).astype(np.int32)


def test_token_ids_are_hashed_at_fitting_registration_lengths__stored() -> None:
    worker, toks = 5, _tokens(1500)
    batches = rechunker(3).rechunk(event(worker, toks), source())
    region = int(event(worker, toks)["region_id"])
    lengths = LEVELS.registration_lengths(region)
    lengths = lengths[lengths <= 1500]
    want = PrefixHasher(KeyNamespace(MODEL)).keys_at(toks, lengths)
    got = np.concatenate([b.keys for b in batches])
    assert sorted(got.tolist()) == sorted(want.tolist())
    table, field_ = LAYOUT.field_of(worker)
    for b in batches:
        assert (b.keys % np.uint64(3) == np.uint64(b.shard)).all()
        assert (b.table, b.field, b.op, b.tier, b.code) == (table, field_, OpKind.SET, Tier.VRAM, 1)
    assert [b.shard for b in batches] == sorted({b.shard for b in batches})


def test_registration_keys_are_used_as_given__sidecar_hashed() -> None:
    ev = event(2, _tokens(10), registration_keys=[3, 4, 5, 6], registration_lengths=[1, 2, 3, 4])
    batches = rechunker(2).rechunk(ev, source())
    assert {b.shard: b.keys.tolist() for b in batches} == {0: [4, 6], 1: [3, 5]}


def test_removed_clears_field_and_cleared_hits_every_shard__ops() -> None:
    ev = event(1, _tokens(600), op="REMOVED", tier="NONE")
    removed = rechunker(3).rechunk(ev, source())
    assert removed and all(b.op is OpKind.REMOVE and b.code == 0 for b in removed)
    cleared = rechunker(3).rechunk({**ev, "op": "CLEARED", "token_ids": None}, source())
    assert [(b.shard, b.op, b.keys.size) for b in cleared] == [
        (s, OpKind.CLEAR_FIELD, 0) for s in range(3)
    ]


def test_short_prompt_yields_no_batches__below_every_level() -> None:
    assert rechunker().rechunk(event(0, _tokens(3)), source()) == []


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"worker_id": 999}, "UNKNOWN_WORKER"),
        ({"region_id": 2, "worker_id": 0}, "INVALID"),
        ({"tier": "NONE"}, "INVALID"),
        ({"token_ids": None}, "INVALID"),
        ({"token_count": 7}, "INVALID"),
        ({"registration_keys": [-1]}, "INVALID"),
        ({"registration_keys": list(range(5000))}, "OVERSIZE"),
    ],
)
def test_invalid_event_raises_with_reason_code__bad_fields(change: dict, code: str) -> None:
    with pytest.raises(InvalidEvent) as info:
        rechunker().rechunk({**event(0, _tokens(300)), **change}, source())
    assert info.value.code == code


def test_op_batch_record_survives_the_codec__runs_of_many_events() -> None:
    rc = rechunker(2)
    runs = []
    for i, w in enumerate([3, 4, 3]):
        runs += rc.rechunk(event(w, _tokens(700, i), tier="DRAM"), source(i, w))
    runs += rc.rechunk({**event(5, _tokens(1)), "op": "CLEARED", "token_ids": None}, source(9, 5))
    groups = by_shard(runs)
    codec = AvroCodec(InProcessRegistry(), validate=True)
    for shard, group in groups.items():
        name, rec = codec.decode(codec.encode("IndexOpBatch", encode_op_batch(shard, group)))
        back = decode_op_batch(rec)
        assert name == "IndexOpBatch" and len(back) == len(group)
        for a, b in zip(back, group, strict=True):
            assert a.keys.tolist() == b.keys.tolist()
            assert (a.shard, a.table, a.field, a.op, a.tier, a.source) == (
                b.shard, b.table, b.field, b.op, b.tier, b.source
            )  # fmt: skip


def test_decode_refuses_inconsistent_record__bad_counts() -> None:
    (b, *_) = rechunker(1).rechunk(event(3, _tokens(700)), source())
    rec = encode_op_batch(0, [b])
    with pytest.raises(InvalidEvent):
        decode_op_batch({**rec, "keys": rec["keys"][:-8]})
    with pytest.raises(InvalidEvent):
        decode_op_batch({**rec, "sources": []})
