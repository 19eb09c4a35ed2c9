"""The engines' KV-event wire format (SGLang 0.5.x and vLLM), decoded into one normal form.

Owns: the msgspec structs pinned to the published layouts, the frame codec of the PUB stream and
of the replay ROUTER socket, and the encoder the emulated worker publishes with. Must not: keep
state, touch sockets, or know our keys and tiers (that is ``block_table`` and ``bridge``).

PUB stream (one ZMQ multipart message per batch; DP rank r publishes on base port + r)::

    frame 0  topic, UTF-8 (the config's "topic"; may be empty)
    frame 1  sequence number, 8 bytes, big-endian, from 0, +1 per batch, per publisher
    frame 2  msgpack(batch)

Batch (msgpack)::

    SGLang:  array [ts: float, events: array, attn_dp_rank: int | nil]   (older: [ts, events])
    vLLM:    map {"ts": float, "events": array, "data_parallel_rank": int | nil}

Event (msgpack), either encoding, in the same batch even::

    map   {"type": "BlockStored", "block_hashes": [...], "parent_block_hash": int | nil,
           "token_ids": [int, ...] | [[int, int], ...], "block_size": int,
           "lora_id": int | nil, "medium": str | nil, "lora_name": str | nil,
           "cache_salt": ..., "session_id": ...}   (unknown keys ignored)
    array ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id,
           medium, lora_name]     (trailing fields omitted when default; extra ones ignored)
    map   {"type": "BlockRemoved", "block_hashes": [...], "medium": str | nil}
    array ["BlockRemoved", block_hashes, medium]
    map   {"type": "AllBlocksCleared"}        array ["AllBlocksCleared"]

``token_ids`` are pairs under EAGLE speculative decoding (SGLang's bigram radix keys: the page's
j-th entry is ``(t[j], t[j+1])``, ``block_size`` counts pairs); the page's own tokens are the
first elements. Events are decoded one by one: an event that does not follow its layout is
returned in ``Batch.rejected`` with the reason and its raw bytes (the bridge dead-letters it) while
the batch's other events are applied.

Block hashes are signed int64 (SGLang) or, in some vLLM builds, bytes; bytes are folded to the
signed big-endian int64 of their first 8 bytes, unsigned ints above 2**63-1 wrap to signed.
``medium`` nil/absent means "GPU"; vLLM says "CPU" where SGLang says "CPU_PINNED".

Replay (ROUTER at replay_endpoint): the client sends one frame, the start sequence as 8 bytes
big-endian (a DEALER adds the empty delimiter itself); the engine answers, per buffered batch with
seq >= start, ``[b"", topic, seq8, payload]`` (SGLang 0.5.23) or ``[b"", seq8, payload]`` (older
SGLang, vLLM), then a terminator whose seq8 is -1 (signed) and whose payload is empty.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import msgspec

from kvcompass.errors import InvalidInputError

END_SEQ = -1
_I64 = 1 << 63
_U64 = 1 << 64


class ProtocolError(InvalidInputError):
    """A frame or payload does not follow the engines' published KV-event layout."""


# -- wire structs: map encoding (SGLang 0.5.23, vLLM) -----------------------------------------


class _MapStored(msgspec.Struct, tag_field="type", tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int | tuple[int, int]]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    cache_salt: str | None = None


class _MapRemoved(msgspec.Struct, tag_field="type", tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None = None


class _MapCleared(msgspec.Struct, tag_field="type", tag="AllBlocksCleared"):
    pass


# -- wire structs: legacy tagged arrays (older SGLang, older vLLM) -----------------------------


class _ArrStored(msgspec.Struct, array_like=True, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int | tuple[int, int]]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None


class _ArrRemoved(msgspec.Struct, array_like=True, tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None = None


class _ArrCleared(msgspec.Struct, array_like=True, tag="AllBlocksCleared"):
    pass


class _ArrBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list[msgspec.Raw]
    attn_dp_rank: int | None = None


class _MapBatch(msgspec.Struct):
    ts: float
    events: list[msgspec.Raw]
    data_parallel_rank: int | None = None
    attn_dp_rank: int | None = None


_MAP_EVENT = msgspec.msgpack.Decoder(_MapStored | _MapRemoved | _MapCleared)
_ARR_EVENT = msgspec.msgpack.Decoder(_ArrStored | _ArrRemoved | _ArrCleared)
_ARR_BATCH = msgspec.msgpack.Decoder(_ArrBatch)
_MAP_BATCH = msgspec.msgpack.Decoder(_MapBatch)


# -- normal form -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stored:
    """Blocks now held in ``medium``; ``token_ids`` are theirs, concatenated, oldest first."""

    block_hashes: tuple[int, ...]
    parent_block_hash: int | None
    token_ids: tuple[int, ...]
    block_size: int
    medium: str
    lora_id: int | None = None
    cache_salt: str | None = None
    """The engine cache namespace of the request that stored them (SGLang's ``cache_salt``: its
    block hashes are chained from a salt-derived root, so they differ from unsalted ones)."""


@dataclass(frozen=True, slots=True)
class Removed:
    """Blocks no longer held in ``medium``."""

    block_hashes: tuple[int, ...]
    medium: str


@dataclass(frozen=True, slots=True)
class Cleared:
    """The engine dropped its whole cache."""


Event = Stored | Removed | Cleared


@dataclass(frozen=True, slots=True)
class Rejected:
    """One event of a batch that does not follow the published layout, kept as read."""

    index: int
    reason: str
    raw: bytes


@dataclass(frozen=True, slots=True)
class Batch:
    """One decoded PUB message (or replayed batch); ``rejected`` are its undecodable events."""

    seq: int
    ts: float
    dp_rank: int | None
    events: tuple[Event, ...]
    rejected: tuple[Rejected, ...] = ()


def _hash(value: int | bytes) -> int:
    if isinstance(value, bytes):
        if not value:
            raise ProtocolError("block hash: expected an int or non-empty bytes, got b''")
        return int.from_bytes(value[:8].rjust(8, b"\0"), "big", signed=True)
    if not -_I64 <= value < _U64:
        raise ProtocolError(f"block hash: expected a 64-bit integer, got {value}")
    return value - _U64 if value >= _I64 else value


def _medium(value: str | None) -> str:
    return "GPU" if value is None else value.upper()


def _tokens(raw: list[int | tuple[int, int]]) -> tuple[int, ...]:
    # EAGLE pairs (t[j], t[j+1]) -> t[j]; one event is either all ints or all pairs. msgspec has
    # checked every element is one or the other; the set of their types is built in C (a
    # per-element isinstance loop was ~60% of a sidecar's decode time at 4K-token prompts).
    kinds = set(map(type, raw))
    if kinds <= {int}:
        return tuple(cast("list[int]", raw))
    if kinds == {tuple}:
        return tuple(t[0] for t in cast("list[tuple[int, int]]", raw))
    raise ProtocolError("BlockStored: token_ids mix ints and EAGLE pairs")


def _normal(ev: object) -> Event:
    if isinstance(ev, _MapStored | _ArrStored):
        n = len(ev.block_hashes)
        if ev.block_size < 1 or len(ev.token_ids) != n * ev.block_size:
            raise ProtocolError(
                f"BlockStored: expected {n} blocks x block_size {ev.block_size} tokens, "
                f"got {len(ev.token_ids)} token ids"
            )
        parent = None if ev.parent_block_hash is None else _hash(ev.parent_block_hash)
        return Stored(
            tuple(_hash(h) for h in ev.block_hashes),
            parent,
            _tokens(ev.token_ids),
            ev.block_size,
            _medium(ev.medium),
            ev.lora_id,
            getattr(ev, "cache_salt", None),
        )
    if isinstance(ev, _MapRemoved | _ArrRemoved):
        return Removed(tuple(_hash(h) for h in ev.block_hashes), _medium(ev.medium))
    return Cleared()


def _is_map(raw: bytes | memoryview) -> bool:
    if not raw:
        raise ProtocolError("msgpack: expected a value, got 0 bytes")
    b = raw[0]
    return 0x80 <= b <= 0x8F or b in (0xDE, 0xDF)


def _decode_event(raw: memoryview) -> Event:
    return _normal(_MAP_EVENT.decode(raw) if _is_map(raw) else _ARR_EVENT.decode(raw))


def decode_payload(seq: int, payload: bytes) -> Batch:
    """Decode one batch payload (either batch and either event encoding). Raises ProtocolError
    when the batch itself is unreadable; an unreadable event lands in ``Batch.rejected``."""
    try:
        if _is_map(payload):
            mb = _MAP_BATCH.decode(payload)
            ts, raws = mb.ts, mb.events
            rank = mb.data_parallel_rank if mb.data_parallel_rank is not None else mb.attn_dp_rank
        else:
            ab = _ARR_BATCH.decode(payload)
            ts, raws, rank = ab.ts, ab.events, ab.attn_dp_rank
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"KV-event batch seq {seq}: {exc}") from exc
    events: list[Event] = []
    rejected: list[Rejected] = []
    for i, r in enumerate(raws):
        try:
            events.append(_decode_event(memoryview(r)))
        except (msgspec.DecodeError, msgspec.ValidationError, ProtocolError) as exc:
            rejected.append(Rejected(i, f"KV-event batch seq {seq} event {i}: {exc}", bytes(r)))
    return Batch(seq, ts, rank, tuple(events), tuple(rejected))


def decode_seq(frame: bytes) -> int:
    """The 8-byte big-endian sequence frame (signed: the replay terminator is -1)."""
    if len(frame) != 8:
        raise ProtocolError(f"sequence frame: expected 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)


def encode_seq(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


def decode_pub(frames: Sequence[bytes]) -> Batch:
    """``[topic, seq8, payload]`` from the SUB socket."""
    if len(frames) != 3:
        raise ProtocolError(f"PUB message: expected 3 frames, got {len(frames)}")
    return decode_payload(decode_seq(frames[1]), frames[2])


def decode_replay(frames: Sequence[bytes]) -> Batch | None:
    """One reply received on a DEALER: ``[b"", (topic,) seq8, payload]``; None at the end."""
    body = list(frames[1:]) if frames and frames[0] == b"" else list(frames)
    if len(body) == 3:
        body = body[1:]
    if len(body) != 2:
        raise ProtocolError(f"replay reply: expected 2 or 3 frames after b'', got {len(body)}")
    seq = decode_seq(body[0])
    if seq == END_SEQ:
        return None
    return decode_payload(seq, body[1])


# -- encoder (the emulated worker speaks SGLang 0.5.23) ----------------------------------------

_ENCODER = msgspec.msgpack.Encoder()


def _event_map(ev: Event) -> dict[str, object]:
    if isinstance(ev, Stored):
        return {
            "type": "BlockStored",
            "block_hashes": list(ev.block_hashes),
            "parent_block_hash": ev.parent_block_hash,
            "token_ids": list(ev.token_ids),
            "block_size": ev.block_size,
            "lora_id": ev.lora_id,
            "medium": ev.medium,
            **({"cache_salt": ev.cache_salt} if ev.cache_salt is not None else {}),
        }
    if isinstance(ev, Removed):
        return {"type": "BlockRemoved", "block_hashes": list(ev.block_hashes), "medium": ev.medium}
    return {"type": "AllBlocksCleared"}


def encode_payload(events: Sequence[Event], dp_rank: int | None, ts: float | None = None) -> bytes:
    """SGLang 0.5.23 layout: array batch ``[ts, events, attn_dp_rank]`` of tagged-map events."""
    stamp = time.time() if ts is None else ts
    return _ENCODER.encode([stamp, [_event_map(e) for e in events], dp_rank])
