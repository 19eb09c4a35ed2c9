"""Frames built to the published layouts (with a plain msgpack encoder, not our structs) decode
to the same normal form: SGLang map events, legacy tagged arrays, vLLM map batches, both replay
reply shapes."""

from __future__ import annotations

import msgspec
import pytest

from workers.protocol import (
    Cleared,
    ProtocolError,
    Removed,
    Stored,
    decode_payload,
    decode_pub,
    decode_replay,
    encode_payload,
)

enc = msgspec.msgpack.encode
SEQ7 = (7).to_bytes(8, "big")
END = (-1).to_bytes(8, "big", signed=True)

STORED = Stored((11, -12), None, (1, 2, 3, 4), 2, "GPU", None)
MOVED = Stored((11,), None, (1, 2), 2, "CPU_PINNED", None)
GONE = Removed((-12,), "GPU")


def test_map_events_in_array_batch_decode__sglang_0_5_23() -> None:
    events = [
        {"type": "BlockStored", "block_hashes": [11, -12], "parent_block_hash": None,
         "token_ids": [1, 2, 3, 4], "block_size": 2, "lora_id": None, "medium": "GPU",
         "cache_salt": "x", "session_id": "s", "lora_name": None},
        {"type": "BlockStored", "block_hashes": [11], "parent_block_hash": None,
         "token_ids": [1, 2], "block_size": 2, "lora_id": None, "medium": "CPU_PINNED"},
        {"type": "BlockRemoved", "block_hashes": [-12], "medium": "GPU"},
        {"type": "AllBlocksCleared"},
    ]  # fmt: skip
    batch = decode_pub([b"kv-events", SEQ7, enc([1.5, events, 3])])
    assert batch.seq == 7 and batch.ts == 1.5 and batch.dp_rank == 3
    salted = Stored((11, -12), None, (1, 2, 3, 4), 2, "GPU", None, cache_salt="x")
    assert batch.events == (salted, MOVED, GONE, Cleared())  # SGLang's cache_salt is kept


def test_legacy_tagged_arrays_decode__older_sglang_two_field_batch() -> None:
    events = [
        ["BlockStored", [11, -12], None, [1, 2, 3, 4], 2, None],
        ["BlockStored", [11], None, [1, 2], 2, None, "CPU_PINNED"],
        ["BlockRemoved", [-12]],
        ["AllBlocksCleared"],
    ]
    batch = decode_payload(0, enc([1.5, events]))
    assert batch.dp_rank is None
    assert batch.events == (STORED, MOVED, GONE, Cleared())


def test_vllm_map_batch_decodes__cpu_medium_and_dp_rank() -> None:
    events = [
        {"type": "BlockStored", "block_hashes": [11], "parent_block_hash": None,
         "token_ids": [1, 2], "block_size": 2, "lora_id": None, "medium": "CPU",
         "lora_name": None, "extra_keys": None},
    ]  # fmt: skip
    batch = decode_payload(1, enc({"ts": 2.0, "events": events, "data_parallel_rank": 1}))
    assert batch.dp_rank == 1
    assert batch.events == (Stored((11,), None, (1, 2), 2, "CPU", None),)


def test_bytes_and_unsigned_hashes_fold_to_signed_int64__vllm_sha_hashes() -> None:
    h = bytes(range(1, 33))
    events = [["BlockRemoved", [h, 2**64 - 1]]]
    batch = decode_payload(0, enc([0.0, events]))
    assert batch.events == (Removed((int.from_bytes(h[:8], "big", signed=True), -1), "GPU"),)


def test_replay_replies_decode__with_and_without_topic_frame() -> None:
    payload = enc([1.0, [["AllBlocksCleared"]], None])
    with_topic = decode_replay([b"", b"kv-events", SEQ7, payload])
    without = decode_replay([b"", SEQ7, payload])
    assert with_topic is not None and without is not None
    assert with_topic.seq == without.seq == 7 and with_topic.events == (Cleared(),)
    assert decode_replay([b"", b"kv-events", END, b""]) is None
    assert decode_replay([b"", END, b""]) is None


@pytest.mark.parametrize("payload", [b"", b"\xc1", enc({"events": []}), enc("text")])
def test_malformed_payload_raises_protocol_error__bad_bytes_or_shape(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_payload(3, payload)


@pytest.mark.parametrize(
    "bad",
    [["Nope", 1], ["BlockStored", [1], None, [1], 2], {"type": "BlockRemoved"},
     {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
      "token_ids": [1, [2, 3]], "block_size": 2, "lora_id": None}],
)  # fmt: skip
def test_undecodable_event_is_rejected_alone__rest_of_batch_decoded(bad: object) -> None:
    batch = decode_payload(3, enc([1.0, [["AllBlocksCleared"], bad, ["BlockRemoved", [-12]]]]))
    assert batch.events == (Cleared(), GONE)
    (rej,) = batch.rejected
    assert rej.index == 1 and rej.raw == enc(bad) and "seq 3 event 1" in rej.reason


def test_eagle_pairs_decode_to_each_pages_own_tokens__bigram_keys() -> None:
    # SGLang with EAGLE publishes page j of tokens t as [(t[j], t[j+1]), ...]
    t = [1, 2, 3, 4, 5]
    pairs = [[t[j], t[j + 1]] for j in range(4)]
    ev = {"type": "BlockStored", "block_hashes": [11, -12], "parent_block_hash": None,
          "token_ids": pairs, "block_size": 2, "lora_id": None, "medium": "GPU"}  # fmt: skip
    batch = decode_payload(0, enc([1.5, [ev], 0]))
    assert batch.events == (STORED,) and batch.rejected == ()


def test_pub_message_with_wrong_frame_count_raises__two_frames() -> None:
    with pytest.raises(ProtocolError, match="3 frames"):
        decode_pub([SEQ7, b""])


def test_encoder_round_trips__sglang_layout() -> None:
    payload = encode_payload([STORED, MOVED, GONE, Cleared()], 0, ts=4.0)
    raw = msgspec.msgpack.decode(payload)
    assert raw[0] == 4.0 and raw[2] == 0 and raw[1][0]["type"] == "BlockStored"
    assert decode_payload(0, payload).events == (STORED, MOVED, GONE, Cleared())
