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

from kvcompass.rechunk import EventRef, InvalidEvent, OpBatch, OpKind
from kvcompass.types import Tier

RUN_DTYPE = np.dtype(
    [("table", "<u4"), ("field", "<u2"), ("op", "u1"), ("tier", "u1"), ("count", "<u4"),
     ("source", "<u4")]
)  # fmt: skip
"""One run of an ``IndexOpBatch`` record (16 bytes; layout in the schema's ``runs`` doc)."""


def encode_op_batch(shard: int, batches: Sequence[OpBatch]) -> dict[str, Any]:
    """The ``IndexOpBatch`` record of runs (all of ``shard``), in order."""
    runs = np.zeros(len(batches), dtype=RUN_DTYPE)
    sources: list[EventRef] = []
    index: dict[EventRef, int] = {}
    for i, b in enumerate(batches):
        src = index.get(b.source)
        if src is None:
            src = index[b.source] = len(sources)
            sources.append(b.source)
        runs[i] = (b.table, b.field, int(b.op), int(b.tier), b.keys.size, src)
    keys = np.concatenate([b.keys for b in batches]) if batches else np.zeros(0, np.uint64)
    return {
        "shard": shard,
        "runs": runs.tobytes(),
        "keys": keys.astype("<u8").tobytes(),
        "sources": [r.to_record() for r in sources],
    }


MAX_OP_RECORD_BYTES = 512 * 1024
"""Bound of one ``IndexOpBatch`` record's runs + keys + sources: half of Kafka's default
``max.message.bytes`` (1 MB), so a take of large valid events never makes a record the broker
refuses (which would hold the rechunk agent: ``pipeline.progress``)."""
_SOURCE_BYTES = 64
"""An ``EventRef`` on the wire: five varints and the topic name (bounded by Kafka's 249)."""


def split_runs(
    batches: Sequence[OpBatch], max_bytes: int = MAX_OP_RECORD_BYTES
) -> list[list[OpBatch]]:
    """Consecutive runs (of one shard) cut into groups whose record stays within ``max_bytes``.

    Order is kept, so applying the groups' records one after the other is applying the runs. A
    run is never cut (one event's keys: at most ``MAX_KEYS_PER_EVENT`` × 8 bytes).
    """
    out: list[list[OpBatch]] = []
    group: list[OpBatch] = []
    size = 0
    for b in batches:
        cost = RUN_DTYPE.itemsize + 8 * int(b.keys.size) + _SOURCE_BYTES + len(b.source.topic)
        if group and size + cost > max_bytes:
            out.append(group)
            group, size = [], 0
        group.append(b)
        size += cost
    if group:
        out.append(group)
    return out


def decode_op_batch(r: Mapping[str, Any]) -> list[OpBatch]:
    """Runs of an ``IndexOpBatch`` record; ``InvalidEvent`` when its parts disagree."""
    raw_runs, raw_keys = r["runs"], r["keys"]
    if len(raw_runs) % RUN_DTYPE.itemsize or len(raw_keys) % 8:
        raise InvalidEvent(
            f"runs/keys: expected multiples of {RUN_DTYPE.itemsize}/8 bytes; "
            f"got {len(raw_runs)}/{len(raw_keys)}"
        )
    runs = np.frombuffer(raw_runs, dtype=RUN_DTYPE)
    keys = np.frombuffer(raw_keys, dtype="<u8").astype(np.uint64)
    sources = [EventRef.from_record(x) for x in r["sources"]]
    counts = runs["count"].astype(np.int64)
    if int(counts.sum()) != keys.size:
        raise InvalidEvent(f"runs: counts sum to {int(counts.sum())}; keys hold {keys.size}")
    if runs.size and (
        int(runs["op"].max()) > 2 or int(runs["tier"].max()) > 2
        or int(runs["source"].max()) >= len(sources)
    ):  # fmt: skip
        raise InvalidEvent("runs: expected op 0..2, tier 0..2 and a source index in range")
    shard = int(r["shard"])
    ends = np.cumsum(counts).tolist()
    out: list[OpBatch] = []
    start = 0
    for run, end in zip(runs.tolist(), ends, strict=True):
        table, field_, op, tier, _, src = run
        out.append(OpBatch(shard, table, field_, OpKind(op), Tier(tier), keys[start:end],
                           sources[src]))  # fmt: skip
        start = end
    return out
