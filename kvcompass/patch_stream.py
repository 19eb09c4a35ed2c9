"""Patches as a stream of single-image records, the form a compacted topic keeps.

Owns cutting a ``ShardPatch`` into one ``PatchRecord`` per image (header, bucket, locator word,
commit), the bytes of each image, and reassembling records read back in order into
``ShardPatch``es a view can apply. The Kafka key of a record is (table, shard, epoch, kind, index),
so compaction keeps the latest image of every bucket and word of every epoch. It knows nothing of
Kafka or Avro: the pipeline's codec wraps ``PatchRecord`` fields in the ``IndexPatch`` schema.

Image bytes (little-endian)::

    HEADER        LudoParams.to_array() as uint64 words
    BUCKET        u8 seed | u8 value_bytes (4|8) | u8 fp_bytes (0|1|2) | 4 values | 4 fingerprints
    LOCATOR_WORD  u64 word
    COMMIT        empty

A locator rebuild inside an epoch is published by the maintenance side as a full image of the
epoch (see ``ShardState``), so no record of an epoch ever precedes that epoch's latest header in
a compacted topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.index import ShardPatch
from kvcompass.ludo import LudoParams, PatchBatch, PatchKind

ParamsLookup = Callable[[int, int, int], LudoParams | None]
"""(table, shard, epoch) -> the params a view already knows for that epoch, if any."""


@dataclass(frozen=True, slots=True)
class PatchRecord:
    """One image: the unit of the ``index-patches`` topic."""

    table: int
    shard: int
    epoch: int
    kind: PatchKind
    index: int
    seq: int
    image: bytes

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        """What compaction keeps the latest of."""
        return (self.table, self.shard, self.epoch, int(self.kind), self.index)


def _bucket_images(batch: PatchBatch) -> list[bytes]:
    p = batch.params
    n = batch.bucket_ids.shape[0]
    vb = 4 * p.value_words
    fb = p.fp_bytes
    row = np.zeros((n, 3 + 4 * vb + 4 * fb), dtype=np.uint8)
    row[:, 0] = batch.bucket_seeds
    row[:, 1] = vb
    row[:, 2] = fb
    vals = batch.bucket_values.astype("<u8")
    vals = vals if vb == 8 else vals.astype("<u4")
    row[:, 3 : 3 + 4 * vb] = vals.view(np.uint8).reshape(n, 4 * vb)
    if fb:
        fps = batch.bucket_fps.astype("<u2" if fb == 2 else np.uint8)
        row[:, 3 + 4 * vb :] = fps.view(np.uint8).reshape(n, 4 * fb)
    return [r.tobytes() for r in row]


def explode(patch: ShardPatch) -> list[PatchRecord]:
    """Records of one ShardPatch in apply order: header, buckets, words, commit."""
    b = patch.batch
    t, s, e, q = patch.table, patch.shard, b.params.epoch, patch.seq
    out: list[PatchRecord] = []
    if b.header:
        out.append(
            PatchRecord(
                t, s, e, PatchKind.HEADER, 0, q, b.params.to_array().astype("<u8").tobytes()
            )
        )
    for i, img in zip(b.bucket_ids.tolist(), _bucket_images(b), strict=True):
        out.append(PatchRecord(t, s, e, PatchKind.BUCKET, i, q, img))
    words = b.words.astype("<u8")
    for i, w in zip(b.word_ids.tolist(), words, strict=True):
        out.append(PatchRecord(t, s, e, PatchKind.LOCATOR_WORD, i, q, w.tobytes()))
    if b.commit:
        out.append(PatchRecord(t, s, e, PatchKind.COMMIT, 0, q, b""))
    return out


def compact(records: Iterable[PatchRecord]) -> list[PatchRecord]:
    """What log compaction leaves: the latest record per key, in original (offset) order."""
    recs = list(records)
    last = {r.key: i for i, r in enumerate(recs)}
    return [r for i, r in enumerate(recs) if last[r.key] == i]


@dataclass
class _Group:
    table: int
    shard: int
    epoch: int
    seq: int
    params: LudoParams | None = None
    header: bool = False
    commit: bool = False
    buckets: list[tuple[int, bytes]] = field(default_factory=list)
    words: list[tuple[int, bytes]] = field(default_factory=list)


class Reassembler:
    """Turns records read in order back into ShardPatches.

    A shard's records arrive in production order (one partition), so consecutive records of one
    shard with the same (table, epoch, seq) form one batch; it closes when the shard's next record
    differs, on a commit, or on ``flush``.
    A batch of an epoch whose params are unknown (no header seen, and ``known`` does not know it)
    cannot be decoded; it is counted in ``undecodable`` and dropped.
    """

    def __init__(self, known: ParamsLookup) -> None:
        self._known = known
        self._open: dict[int, _Group] = {}
        self._params: dict[tuple[int, int, int], LudoParams] = {}
        self.undecodable = 0

    def feed(self, rec: PatchRecord) -> list[ShardPatch]:
        out: list[ShardPatch] = []
        slot = rec.shard
        g = self._open.get(slot)
        if g is not None and (g.seq != rec.seq or g.epoch != rec.epoch or g.table != rec.table):
            out.extend(self._close(slot))
            g = None
        if g is None:
            g = _Group(rec.table, rec.shard, rec.epoch, rec.seq)
            self._open[slot] = g
        if rec.kind == PatchKind.HEADER:
            words = np.frombuffer(rec.image, dtype="<u8").astype(np.uint64)
            g.params = LudoParams.from_array(words)
            g.header = True
            self._params[(rec.table, rec.shard, rec.epoch)] = g.params
        elif rec.kind == PatchKind.BUCKET:
            g.buckets.append((rec.index, rec.image))
        elif rec.kind == PatchKind.LOCATOR_WORD:
            if len(rec.image) != 8:
                raise InvalidInputError(f"locator word image must be 8 bytes, got {len(rec.image)}")
            g.words.append((rec.index, rec.image))
        elif rec.kind == PatchKind.COMMIT:
            g.commit = True
            out.extend(self._close(slot))
        else:
            raise InvalidInputError(f"unknown patch kind {rec.kind!r}")
        return out

    def flush(self) -> list[ShardPatch]:
        out: list[ShardPatch] = []
        for slot in list(self._open):
            out.extend(self._close(slot))
        return out

    def _close(self, slot: int) -> list[ShardPatch]:
        g = self._open.pop(slot)
        params = g.params or self._params.get((g.table, g.shard, g.epoch))
        if params is None:
            params = self._known(g.table, g.shard, g.epoch)
        if params is None:
            self.undecodable += 1
            return []
        return [ShardPatch(g.table, g.shard, g.seq, _batch(g, params))]


def _decode_buckets(
    params: LudoParams, buckets: list[tuple[int, bytes]]
) -> tuple[NDArray[np.int64], NDArray[np.uint8], NDArray[np.uint64], NDArray[np.uint16]]:
    n = len(buckets)
    vb, fb = 4 * params.value_words, params.fp_bytes
    width = 3 + 4 * vb + 4 * fb
    ids = np.fromiter((i for i, _ in buckets), dtype=np.int64, count=n)
    raw = np.frombuffer(b"".join(img for _, img in buckets), dtype=np.uint8)
    if raw.size != n * width:
        raise InvalidInputError(
            f"bucket images must be {width} bytes for {params.value_bits}-bit values and "
            f"{params.fp_bits}-bit fingerprints; got {raw.size} bytes for {n} images"
        )
    raw = raw.reshape(n, width) if n else raw.reshape(0, width)
    if n and ((raw[:, 1] != vb).any() or (raw[:, 2] != fb).any()):
        raise InvalidInputError(
            "bucket image value/fingerprint widths disagree with the epoch header"
        )
    seeds = raw[:, 0].copy()
    vdt = "<u4" if vb == 4 else "<u8"
    values = np.ascontiguousarray(raw[:, 3 : 3 + 4 * vb]).view(vdt).astype(np.uint64).reshape(n, 4)
    fps = np.zeros((n, 4), dtype=np.uint16)
    if fb:
        fdt = np.uint8 if fb == 1 else "<u2"
        fps[:] = np.ascontiguousarray(raw[:, 3 + 4 * vb :]).view(fdt).reshape(n, 4)
    return ids, seeds, values, fps


def _batch(g: _Group, params: LudoParams) -> PatchBatch:
    ids, seeds, values, fps = _decode_buckets(params, g.buckets)
    wids = np.fromiter((i for i, _ in g.words), dtype=np.int64, count=len(g.words))
    words = np.frombuffer(b"".join(w for _, w in g.words), dtype="<u8").astype(np.uint64)
    return PatchBatch(
        params=params,
        header=g.header,
        bucket_ids=ids,
        bucket_seeds=seeds,
        bucket_values=values,
        bucket_fps=fps,
        word_ids=wids,
        words=words,
        commit=g.commit,
    )
