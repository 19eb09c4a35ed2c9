"""A take's index ops as columns: the hot path's form of a list of ``OpBatch`` runs (pure).

Owns ``Runs`` (one shard's runs as flat arrays: run i is one event's change to one worker's
field of ``keys[start_i : start_i + count[i]]``, runs in event order) and ``split_take``, which
turns the planned events of a whole rechunk take (``kvcompass.rechunk.Rechunker.plan``) into one
``Runs`` per shard with one stable sort over every key of the take, instead of a split and a few
Python objects per event. The rechunk stage encodes a ``Runs`` straight into an ``IndexOpBatch``
record (``wire.index_ops``); the maintenance unit applies one (``MaintenanceUnit.apply_runs``).
``batches`` / ``from_batches`` convert to and from the per-run ``OpBatch`` form that recovery,
replay and the tests use, so both forms go through the same apply.

Must not: validate events (``Rechunker.plan`` does) or talk to Kafka.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.rechunk import EventRef, OpBatch, OpKind, Planned
from kvcompass.shards import shard_of
from kvcompass.types import Tier

_I64 = np.int64


@dataclass(frozen=True, slots=True)
class Runs:
    """One shard's runs as columns (all int64 but ``keys``); ``source`` indexes ``sources``."""

    shard: int
    table: NDArray[np.int64]
    field: NDArray[np.int64]
    op: NDArray[np.int64]
    tier: NDArray[np.int64]
    count: NDArray[np.int64]
    source: NDArray[np.int64]
    keys: NDArray[np.uint64]
    sources: list[EventRef]

    def __len__(self) -> int:
        return int(self.table.shape[0])

    @property
    def code(self) -> NDArray[np.int64]:
        """The 2-bit value each run writes (its tier for SET, 0 for REMOVE and CLEAR_FIELD)."""
        return np.where(self.op == int(OpKind.SET), self.tier, 0)

    def take(self, rows: NDArray[np.int64]) -> Runs:
        """The runs ``rows`` (ascending), with their keys; ``sources`` is shared, not copied."""
        ends = np.cumsum(self.count)
        starts = ends - self.count
        counts = self.count[rows]
        idx = _ranges(starts[rows], counts)
        return Runs(
            self.shard,
            self.table[rows],
            self.field[rows],
            self.op[rows],
            self.tier[rows],
            counts,
            self.source[rows],
            self.keys[idx],
            self.sources,
        )

    def batches(self) -> list[OpBatch]:
        """The same runs as ``OpBatch`` objects (recovery, replay, tests)."""
        out: list[OpBatch] = []
        start = 0
        cols = (self.table, self.field, self.op, self.tier, self.count, self.source)
        rows = zip(*(c.tolist() for c in cols), strict=True)
        for table, field_, op, tier, count, src in rows:
            keys = self.keys[start : start + count]
            out.append(
                OpBatch(self.shard, table, field_, OpKind(op), Tier(tier), keys, self.sources[src])
            )
            start += count
        return out

    @classmethod
    def from_batches(cls, shard: int, batches: Sequence[OpBatch]) -> Runs:
        """Columns of ``batches`` (all of ``shard``), sources de-duplicated in first-seen order."""
        index: dict[EventRef, int] = {}
        sources: list[EventRef] = []
        src = np.empty(len(batches), _I64)
        for i, b in enumerate(batches):
            j = index.get(b.source)
            if j is None:
                j = index[b.source] = len(sources)
                sources.append(b.source)
            src[i] = j
        keys = np.concatenate([b.keys for b in batches]) if batches else np.zeros(0, np.uint64)
        return cls(
            shard,
            np.array([b.table for b in batches], _I64),
            np.array([b.field for b in batches], _I64),
            np.array([int(b.op) for b in batches], _I64),
            np.array([int(b.tier) for b in batches], _I64),
            np.array([b.keys.size for b in batches], _I64),
            src,
            keys.astype(np.uint64, copy=False),
            sources,
        )


def concat(shard: int, parts: Sequence[Runs]) -> Runs:
    """The runs of ``parts`` one after the other (a take of several records of one shard)."""
    if len(parts) == 1:
        return parts[0]
    sources: list[EventRef] = []
    shifted: list[NDArray[np.int64]] = []
    for p in parts:
        shifted.append(p.source + len(sources))
        sources.extend(p.sources)

    def cat(name: str) -> NDArray[np.int64]:
        return np.concatenate([getattr(p, name) for p in parts]) if parts else np.zeros(0, _I64)

    keys = np.concatenate([p.keys for p in parts]) if parts else np.zeros(0, np.uint64)
    src = np.concatenate(shifted) if parts else np.zeros(0, _I64)
    return Runs(shard, cat("table"), cat("field"), cat("op"), cat("tier"), cat("count"), src,
                keys, sources)  # fmt: skip


def _ranges(starts: NDArray[np.int64], counts: NDArray[np.int64]) -> NDArray[np.int64]:
    """Concatenated ``arange(s, s + c)`` of every (s, c), vectorised."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, _I64)
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=_I64)


def split_take(
    planned: Sequence[Planned], sources: Sequence[EventRef], n_shards: int
) -> list[Runs]:
    """One ``Runs`` per shard touched by ``planned`` (event i came from ``sources[i]``), shards
    ascending; within a shard, runs keep the events' order, a CLEARED event (``keys`` None) is a
    CLEAR_FIELD run in every shard, and an event's keys keep their order. Equal to splitting
    each event alone (``Rechunker.rechunk``) and concatenating per shard (tested)."""
    n_ev = len(planned)
    if n_ev == 0:
        return []
    meta = np.array([(p.table, p.field, int(p.op), int(p.tier)) for p in planned], _I64)
    keyed = [i for i, p in enumerate(planned) if p.keys is not None and p.keys.size]
    cleared = [i for i, p in enumerate(planned) if p.keys is None]
    if keyed:
        parts = [planned[i].keys for i in keyed]
        sizes = np.array([k.size for k in parts], _I64)  # type: ignore[union-attr]
        keys = np.concatenate(parts).astype(np.uint64, copy=False)  # type: ignore[arg-type]
        ev = np.repeat(np.array(keyed, _I64), sizes)
    else:
        keys, ev = np.zeros(0, np.uint64), np.zeros(0, _I64)
    owner = shard_of(keys, n_shards)
    order = np.argsort(owner * n_ev + ev, kind="stable")
    keys, owner, ev = keys[order], owner[order], ev[order]
    # a run starts where (shard, event) changes
    new = np.ones(keys.size, np.bool_)
    new[1:] = (owner[1:] != owner[:-1]) | (ev[1:] != ev[:-1])
    starts = np.flatnonzero(new)
    run_shard, run_ev = owner[starts], ev[starts]
    run_count = np.diff(np.append(starts, keys.size)).astype(_I64)
    if cleared:
        c = np.array(cleared, _I64)
        run_shard = np.concatenate([run_shard, np.repeat(np.arange(n_shards, dtype=_I64), c.size)])
        run_ev = np.concatenate([run_ev, np.tile(c, n_shards)])
        run_count = np.concatenate([run_count, np.zeros(c.size * n_shards, _I64)])
        o = np.argsort(run_shard * n_ev + run_ev, kind="stable")
        run_shard, run_ev, run_count = run_shard[o], run_ev[o], run_count[o]
    out: list[Runs] = []
    bounds = np.searchsorted(run_shard, np.arange(n_shards + 1, dtype=_I64))
    key_bounds = np.searchsorted(owner, np.arange(n_shards + 1, dtype=_I64))
    all_sources = list(sources)
    for s in range(n_shards):
        a, b = int(bounds[s]), int(bounds[s + 1])
        if a == b:
            continue
        evs = run_ev[a:b]
        used, src = np.unique(evs, return_inverse=True)
        m = meta[evs]
        out.append(
            Runs(
                s,
                m[:, 0].copy(),
                m[:, 1].copy(),
                m[:, 2].copy(),
                m[:, 3].copy(),
                run_count[a:b].copy(),
                src.astype(_I64),
                keys[int(key_bounds[s]) : int(key_bounds[s + 1])],
                [all_sources[i] for i in used.tolist()],
            )
        )
    return out
