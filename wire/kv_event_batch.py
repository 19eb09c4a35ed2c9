"""``kv-events`` values of a whole take decoded in one numba pass (the rechunk stage's hot path).

The rechunk stage reads one ``KvEvent`` per worker event; fastavro costs ~10 µs per record here
(``bench/codec.py``), a fifth of the per-event budget of a worker process. ``decode_take`` parses
every value of a take that is a ``KvEvent`` v2 (schema id 11, ``schemas/kv_event.v2.avsc``) in one
kernel call over the concatenated bytes, and returns for each one a record equal to
``AvroCodec.decode``'s (tested against it on random and mutated records), except that
``registration_lengths`` / ``registration_keys`` are int64 numpy arrays (views of one flat array)
and ``block_hashes`` is not materialised (an empty list: nothing downstream reads it; its count is
checked). Anything else (another schema id, a malformed body, an ``int`` out of range) is left to
the caller (None in its slot), who decodes it with the codec for its exact error.

Layout read (Avro binary, ``zz`` = zig-zag varint): magic 0x00 | id (4 B, big-endian) = 11 |
zz(worker_id) zz(region_id) string(model) union(null|string sharing_group) zz(op) zz(tier)
zz(token_count) union(null|bytes token_ids) array<long>(block_hashes) union(null|long
parent_block_hash) zz(block_size_tokens) union(null|array<int> registration_lengths)
union(null|array<long> registration_keys) zz(engine_seq) zz(timestamp_ms) zz(cache_state);
an array is blocks of zz(count) items (a negative count is followed by the block's byte size),
ended by a zero count. Must not: validate meaning (``kvcompass.rechunk`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numba as nb
import numpy as np
from numpy.typing import NDArray

KV_EVENT_V2_ID = 11
_OPS = ("STORED", "TIER_MOVED", "REMOVED", "CLEARED")
_TIERS = ("NONE", "VRAM", "DRAM")
_STATES = ("KNOWN", "UNKNOWN")
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1

# per-record output columns (int64)
C_WORKER, C_REGION, C_OP, C_TIER, C_COUNT, C_BLOCK, C_SEQ, C_TS, C_STATE = range(9)
C_MODEL_AT, C_MODEL_LEN, C_GROUP_AT, C_GROUP_LEN, C_TOK_AT, C_TOK_LEN = range(9, 15)
C_LEN_AT, C_LEN_N, C_KEY_AT, C_KEY_N, C_PARENT, C_PARENT_SET, C_HASHES, C_OK = range(15, 23)
N_COLS = 23


@nb.njit(cache=True)
def _varint(buf: Any, pos: int, end: int) -> tuple[Any, int, bool]:
    """(value, next position, ok) of one zig-zag varint at ``pos`` (at most 10 bytes)."""
    z = np.uint64(0)
    shift = 0
    while pos < end and shift < 64:
        b = buf[pos]
        pos += 1
        z |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            v = np.int64(z >> np.uint64(1)) ^ -np.int64(z & np.uint64(1))
            return v, pos, True
        shift += 7
    return 0, pos, False


@nb.njit(cache=True)
def _parse(buf: Any, starts: Any, ends: Any, cols: Any, flat: Any) -> int:
    """Fill ``cols[i]`` for every record; ``cols[i, C_OK] = 0`` marks one left to the codec.
    Registration lengths and keys go to ``flat`` (their positions in the columns). Returns the
    number of ``flat`` slots used."""
    used = 0
    for i in range(starts.shape[0]):
        pos, end = starts[i], ends[i]
        if end - pos < 5 or buf[pos] != 0 or buf[pos + 1] != 0 or buf[pos + 2] != 0:
            continue
        if buf[pos + 3] != 0 or buf[pos + 4] != 11:
            continue
        pos += 5
        ok = True
        vals = np.zeros(9, np.int64)
        # worker_id, region_id
        for k in range(2):
            v, pos, good = _varint(buf, pos, end)
            ok = ok and good and -(2**31) <= v < 2**31
            vals[k] = v
        # model
        n, pos, good = _varint(buf, pos, end)
        ok = ok and good and 0 <= n <= end - pos
        if not ok:
            continue
        cols[i, C_MODEL_AT], cols[i, C_MODEL_LEN] = pos, n
        pos += n
        # sharing_group: union null | string
        u, pos, good = _varint(buf, pos, end)
        ok = good and (u == 0 or u == 1)
        cols[i, C_GROUP_LEN] = -1
        if ok and u == 1:
            n, pos, good = _varint(buf, pos, end)
            ok = good and 0 <= n <= end - pos
            cols[i, C_GROUP_AT], cols[i, C_GROUP_LEN] = pos, n
            pos += n
        if not ok:
            continue
        op, pos, g1 = _varint(buf, pos, end)
        tier, pos, g2 = _varint(buf, pos, end)
        count, pos, g3 = _varint(buf, pos, end)
        ok = g1 and g2 and g3 and 0 <= op <= 3 and 0 <= tier <= 2
        ok = ok and -(2**31) <= count < 2**31
        # token_ids: union null | bytes
        u, pos, good = _varint(buf, pos, end)
        ok = ok and good and (u == 0 or u == 1)
        cols[i, C_TOK_LEN] = -1
        if ok and u == 1:
            n, pos, good = _varint(buf, pos, end)
            ok = good and 0 <= n <= end - pos
            cols[i, C_TOK_AT], cols[i, C_TOK_LEN] = pos, n
            pos += n
        if not ok:
            continue
        # block_hashes: array<long>, skipped (counted)
        hashes = 0
        while ok:
            n, pos, good = _varint(buf, pos, end)
            if not good:
                ok = False
                break
            if n == 0:
                break
            if n < 0:
                n = -n
                _, pos, good = _varint(buf, pos, end)  # the block's byte size
                ok = good
            if n > end - pos:  # every item takes a byte at least
                ok = False
                break
            for _ in range(n):
                _, pos, good = _varint(buf, pos, end)
                if not good:
                    ok = False
                    break
            hashes += n
        cols[i, C_HASHES] = hashes
        # parent_block_hash: union null | long
        u, pos, good = _varint(buf, pos, end)
        ok = ok and good and (u == 0 or u == 1)
        cols[i, C_PARENT_SET] = 0
        if ok and u == 1:
            v, pos, good = _varint(buf, pos, end)
            ok = good
            cols[i, C_PARENT], cols[i, C_PARENT_SET] = v, 1
        block, pos, good = _varint(buf, pos, end)
        ok = ok and good and -(2**31) <= block < 2**31
        # registration_lengths (ints) and registration_keys (longs): union null | array
        for which in range(2):
            at, nn = used, -1
            u, pos, good = _varint(buf, pos, end)
            ok = ok and good and (u == 0 or u == 1)
            if ok and u == 1:
                nn = 0
                while ok:
                    n, pos, good = _varint(buf, pos, end)
                    if not good:
                        ok = False
                        break
                    if n == 0:
                        break
                    if n < 0:
                        n = -n
                        _, pos, good = _varint(buf, pos, end)
                        ok = good
                    if n > end - pos:  # every item takes a byte at least
                        ok = False
                        break
                    for _ in range(n):
                        v, pos, good = _varint(buf, pos, end)
                        if which == 0 and not -(2**31) <= v < 2**31:
                            good = False
                        if not (good and used < flat.shape[0]):
                            ok = False
                            break
                        flat[used] = v
                        used += 1
                        nn += 1
            if which == 0:
                cols[i, C_LEN_AT], cols[i, C_LEN_N] = at, nn
            else:
                cols[i, C_KEY_AT], cols[i, C_KEY_N] = at, nn
        seq, pos, g1 = _varint(buf, pos, end)
        ts, pos, g2 = _varint(buf, pos, end)
        state, pos, g3 = _varint(buf, pos, end)
        ok = ok and g1 and g2 and g3 and 0 <= state <= 1 and pos == end
        if not ok:
            continue
        cols[i, C_WORKER], cols[i, C_REGION] = vals[0], vals[1]
        cols[i, C_OP], cols[i, C_TIER], cols[i, C_COUNT] = op, tier, count
        cols[i, C_BLOCK], cols[i, C_SEQ], cols[i, C_TS], cols[i, C_STATE] = block, seq, ts, state
        cols[i, C_OK] = 1
    return used


def decode_take(values: Sequence[bytes | None]) -> list[dict[str, Any] | None]:
    """The ``KvEvent`` v2 records of ``values`` (None where the codec must decide)."""
    n = len(values)
    if n == 0:
        return []
    sizes = np.fromiter((0 if v is None else len(v) for v in values), np.int64, n)
    ends = np.cumsum(sizes)
    starts = ends - sizes
    blob = b"".join(v for v in values if v is not None)
    buf = np.frombuffer(blob, np.uint8)
    cols = np.zeros((n, N_COLS), np.int64)
    flat = np.zeros(max(1, int(buf.size)), np.int64)
    _parse(buf, starts, ends, cols, flat)
    out: list[dict[str, Any] | None] = []
    for i, row in enumerate(cols.tolist()):
        if not row[C_OK] or values[i] is None:
            out.append(None)
            continue
        out.append(_record(blob, row, flat))
    return out


def _text(blob: bytes, at: int, n: int) -> str:
    return blob[at : at + n].decode("utf-8")


def _record(blob: bytes, row: list[int], flat: NDArray[np.int64]) -> dict[str, Any] | None:
    try:
        model = _text(blob, row[C_MODEL_AT], row[C_MODEL_LEN])
        group = None if row[C_GROUP_LEN] < 0 else _text(blob, row[C_GROUP_AT], row[C_GROUP_LEN])
    except UnicodeDecodeError:
        return None  # the codec says why
    n_len, n_key = row[C_LEN_N], row[C_KEY_N]
    return {
        "worker_id": row[C_WORKER], "region_id": row[C_REGION], "model": model,
        "sharing_group": group, "op": _OPS[row[C_OP]], "tier": _TIERS[row[C_TIER]],
        "token_count": row[C_COUNT],
        "token_ids": None if row[C_TOK_LEN] < 0
        else blob[row[C_TOK_AT] : row[C_TOK_AT] + row[C_TOK_LEN]],
        "block_hashes": [], "block_hash_count": row[C_HASHES],
        "parent_block_hash": row[C_PARENT] if row[C_PARENT_SET] else None,
        "block_size_tokens": row[C_BLOCK],
        "registration_lengths": None if n_len < 0
        else flat[row[C_LEN_AT] : row[C_LEN_AT] + n_len],
        "registration_keys": None if n_key < 0 else flat[row[C_KEY_AT] : row[C_KEY_AT] + n_key],
        "engine_seq": row[C_SEQ], "timestamp_ms": row[C_TS],
        "cache_state": _STATES[row[C_STATE]],
    }  # fmt: skip
