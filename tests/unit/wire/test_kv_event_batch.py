"""``wire.kv_event_batch.decode_take`` equals the codec on every record it takes, and leaves the
rest (other schemas, malformed bodies) to it."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.codec import AvroCodec, DecodeError
from wire.kv_event_batch import decode_take
from wire.registry import InProcessRegistry

CODEC = AvroCodec(InProcessRegistry(), validate=True)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def kv_events(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 20))
    return {
        "worker_id": draw(I32), "region_id": draw(I32), "model": draw(st.text(max_size=12)),
        "sharing_group": draw(st.none() | st.text(max_size=8)),
        "op": draw(st.sampled_from(["STORED", "TIER_MOVED", "REMOVED", "CLEARED"])),
        "tier": draw(st.sampled_from(["NONE", "VRAM", "DRAM"])), "token_count": draw(I32),
        "token_ids": draw(st.none() | st.binary(max_size=40)),
        "block_hashes": draw(st.lists(I64, max_size=300)),
        "parent_block_hash": draw(st.none() | I64), "block_size_tokens": draw(I32),
        "registration_lengths": draw(st.none() | st.lists(I32, min_size=n, max_size=n)),
        "registration_keys": draw(st.none() | st.lists(I64, min_size=n, max_size=n)),
        "engine_seq": draw(I64), "timestamp_ms": draw(I64),
        "cache_state": draw(st.sampled_from(["KNOWN", "UNKNOWN"])),
    }  # fmt: skip


def _same(fast: dict[str, Any], slow: dict[str, Any]) -> None:
    assert fast["block_hash_count"] == len(slow["block_hashes"])
    for k, v in slow.items():
        got = fast[k]
        if k == "block_hashes":
            assert got == []
        elif k in ("registration_lengths", "registration_keys") and v is not None:
            assert isinstance(got, np.ndarray) and got.tolist() == v
        else:
            assert got == v, k


@settings(max_examples=200, deadline=None)
@given(st.lists(kv_events(), min_size=1, max_size=8), st.data())
def test_decode_take_equals_the_codec__random_and_mutated(evs: list[dict[str, Any]],
                                                          data: st.DataObject) -> None:  # fmt: skip
    values: list[bytes | None] = [CODEC.encode("KvEvent", e) for e in evs]
    # mutate some: cut, flip a byte, another schema, null
    kept: list[bool] = []
    for i in range(len(values)):
        v = values[i]
        assert v is not None
        how = data.draw(st.sampled_from(["keep", "keep", "cut", "flip", "other", "null"]))
        kept.append(how == "keep")
        if how == "cut":
            values[i] = v[: data.draw(st.integers(0, len(v) - 1))]
        elif how == "flip":
            at = data.draw(st.integers(0, len(v) - 1))
            values[i] = v[:at] + bytes([v[at] ^ data.draw(st.integers(1, 255))]) + v[at + 1 :]
        elif how == "other":
            values[i] = CODEC.encode("QueueVector", {"region_id": 1, "worker_ids": [],
                                     "queue_ms": [], "seq": 1, "timestamp_ms": 1})  # fmt: skip
        elif how == "null":
            values[i] = None
    for v, fast, keep in zip(values, decode_take(values), kept, strict=True):
        if keep:
            assert fast is not None  # a record the codec wrote is taken by the fast path
        try:
            name, slow = CODEC.decode(v or b"")
        except DecodeError:
            assert fast is None  # the codec refuses it: so must the fast path
            continue
        if name != "KvEvent" or v is None:
            assert fast is None
        elif fast is not None:  # None is allowed: the codec then decides
            _same(fast, slow)


def test_decode_take_takes_the_sidecars_records() -> None:
    ev = {"worker_id": 3, "region_id": 1, "model": "m", "sharing_group": None, "op": "STORED",
          "tier": "VRAM", "token_count": 300, "token_ids": None, "block_hashes": [],
          "parent_block_hash": 7, "block_size_tokens": 16, "registration_lengths": [128, 256],
          "registration_keys": [5, 2**62], "engine_seq": 9, "timestamp_ms": 1,
          "cache_state": "KNOWN"}  # fmt: skip
    (fast,) = decode_take([CODEC.encode("KvEvent", ev)])
    assert fast is not None
    _same(fast, ev)
