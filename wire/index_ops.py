"""``index-ops`` on the wire: the ``IndexOpBatch`` record of a shard's runs, and its size bound.

Owns the encoding of the core's ``OpBatch`` runs (``kvcompass.rechunk``) into one ``IndexOpBatch``
record per shard and take (``runs``: packed 16-byte rows, ``keys``: little-endian u64, ``sources``:
the events they came from; the schema's docs give the byte layout), cutting a take's runs into
records that stay under ``MAX_OP_RECORD_BYTES``, and decoding a record back into runs.
Must not: decide which ops an event makes (``kvcompass.rechunk``) or talk to Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kvcompass.op_runs import Runs
from kvcompass.rechunk import EventRef, InvalidEvent, OpBatch

RUN_DTYPE = np.dtype(
    [("table", "<u4"), ("field", "<u2"), ("op", "u1"), ("tier", "u1"), ("count", "<u4"),
     ("source", "<u4")]
)  # fmt: skip
"""One run of an ``IndexOpBatch`` record (16 bytes; layout in the schema's ``runs`` doc)."""

SOURCE_DTYPE = np.dtype(
    [("worker_id", "<i4"), ("partition", "<i4"), ("engine_seq", "<i8"), ("offset", "<i8"),
     ("timestamp_ms", "<i8"), ("produced_ms", "<i8")]
)  # fmt: skip
"""One source event of an ``IndexOpBatch`` v2 record (40 bytes; the schema's ``sources`` doc)."""


def encode_runs(runs: Runs) -> dict[str, Any]:
    """The ``IndexOpBatch`` record of one shard's runs, in order (the rechunk hot path)."""
    packed = np.empty(len(runs), dtype=RUN_DTYPE)
    for name in RUN_DTYPE.names or ():
        packed[name] = getattr(runs, name)
    src = np.array([(r.worker_id, r.partition, r.engine_seq, r.offset, r.timestamp_ms,
                     r.produced_ms) for r in runs.sources], dtype=SOURCE_DTYPE)  # fmt: skip
    topics = {r.topic for r in runs.sources}
    if len(topics) > 1:
        raise InvalidEvent(f"sources: expected one source topic per record; got {sorted(topics)}")
    return {
        "shard": runs.shard,
        "runs": packed.tobytes(),
        "keys": runs.keys.astype("<u8", copy=False).tobytes(),
        "source_topic": topics.pop() if topics else "",
        "sources": src.tobytes(),
    }


def encode_op_batch(shard: int, batches: Sequence[OpBatch]) -> dict[str, Any]:
    """The ``IndexOpBatch`` record of runs (all of ``shard``), in order."""
    return encode_runs(Runs.from_batches(shard, batches))


MAX_OP_RECORD_BYTES = 512 * 1024
"""Bound of one ``IndexOpBatch`` record's runs + keys + sources: half of Kafka's default
``max.message.bytes`` (1 MB), so a take of large valid events never makes a record the broker
refuses (which would hold the rechunk stage: ``pipeline.progress``)."""
_SOURCE_BYTES = 64
"""An ``EventRef`` on the wire: five varints and the topic name (bounded by Kafka's 249)."""


def split_runs(
    batches: Sequence[OpBatch], max_bytes: int = MAX_OP_RECORD_BYTES
) -> list[list[OpBatch]]:
    """Consecutive runs (of one shard) cut into groups whose record stays within ``max_bytes``.

    Order is kept, so applying the groups' records one after the other is applying the runs. A
    run is never cut (one event's keys: at most ``MAX_KEYS_PER_EVENT`` × 8 bytes).
    """
    if not batches:
        return []
    runs = Runs.from_batches(batches[0].shard, batches)
    out: list[list[OpBatch]] = []
    i = 0
    for part in split_runs_of(runs, max_bytes):
        out.append(list(batches[i : i + len(part)]))
        i += len(part)
    return out


def split_runs_of(runs: Runs, max_bytes: int = MAX_OP_RECORD_BYTES) -> list[Runs]:
    """``runs`` cut into consecutive parts whose record stays within ``max_bytes`` (a run is
    never cut; every source is counted in each run that names it, an upper bound)."""
    topic = max((len(r.topic) for r in runs.sources), default=0)
    cost = RUN_DTYPE.itemsize + 8 * runs.count + _SOURCE_BYTES + topic
    total = np.cumsum(cost)
    if not total.size or int(total[-1]) <= max_bytes:
        return [runs]
    out: list[Runs] = []
    start, base = 0, 0
    n = len(runs)
    while start < n:
        end = int(np.searchsorted(total, base + max_bytes, side="right"))
        end = max(end, start + 1)
        out.append(runs.take(np.arange(start, end, dtype=np.int64)))
        base = int(total[end - 1])
        start = end
    return out


def decode_runs(r: Mapping[str, Any]) -> Runs:
    """Runs of an ``IndexOpBatch`` record as columns; ``InvalidEvent`` when its parts disagree."""
    raw_runs, raw_keys = r["runs"], r["keys"]
    if len(raw_runs) % RUN_DTYPE.itemsize or len(raw_keys) % 8:
        raise InvalidEvent(
            f"runs/keys: expected multiples of {RUN_DTYPE.itemsize}/8 bytes; "
            f"got {len(raw_runs)}/{len(raw_keys)}"
        )
    packed = np.frombuffer(raw_runs, dtype=RUN_DTYPE)
    keys = np.frombuffer(raw_keys, dtype="<u8").astype(np.uint64)
    raw_src = r["sources"]
    if isinstance(raw_src, bytes):  # v2: packed
        if len(raw_src) % SOURCE_DTYPE.itemsize:
            raise InvalidEvent(f"sources: expected a multiple of {SOURCE_DTYPE.itemsize} bytes")
        topic = str(r["source_topic"])
        sources = [EventRef(w, es, topic, p, o, t, pr) for w, p, es, o, t, pr in
                   np.frombuffer(raw_src, dtype=SOURCE_DTYPE).tolist()]  # fmt: skip
    else:  # v1: one EventRef record each
        sources = [EventRef.from_record(x) for x in raw_src]
    counts = packed["count"].astype(np.int64)
    if int(counts.sum()) != keys.size:
        raise InvalidEvent(f"runs: counts sum to {int(counts.sum())}; keys hold {keys.size}")
    if packed.size and (
        int(packed["op"].max()) > 2 or int(packed["tier"].max()) > 2
        or int(packed["source"].max()) >= len(sources)
    ):  # fmt: skip
        raise InvalidEvent("runs: expected op 0..2, tier 0..2 and a source index in range")
    col = {
        name: packed[name].astype(np.int64) for name in ("table", "field", "op", "tier", "source")
    }
    return Runs(int(r["shard"]), col["table"], col["field"], col["op"], col["tier"], counts,
                col["source"], keys, sources)  # fmt: skip


def decode_op_batch(r: Mapping[str, Any]) -> list[OpBatch]:
    """Runs of an ``IndexOpBatch`` record; ``InvalidEvent`` when its parts disagree."""
    return decode_runs(r).batches()
