"""KV-event bridge: one engine DP rank's ZMQ stream -> ``kv-events`` records (architecture §8).

Owns the sequence discipline (in order, duplicate, gap -> replay, gap older than the engine's
buffer -> CLEARED + degraded, engine restart), and turning block-table changes into KvEvent
records. ``RankBridge`` is pure decisions over decoded batches (tested without sockets); the asyncio
shell with the SUB and replay sockets is ``workers.bridge_zmq.bridge_rank``.
Must not: hash or track blocks itself (``block_table``), or decode frames (``protocol``).

``engine_seq`` of a record (unique per worker, increasing, stable across re-deliveries and
replays of the same engine batch, distinct after an engine restart)::

    bits 62..22  engine batch timestamp, ms since the epoch (41 bits: until 2039)
    bits 21..12  engine batch sequence number mod 1024
    bits 11..0   index of the record within the batch (a batch yields < 4096 records)

Degraded: after a lost gap the table is empty but the engine still holds pages we never saw;
stores below them are orphans and removals of them unknown. The worker counts as re-learned
after ``relearn_batches`` consecutive batches with neither (a heuristic: the engine cannot be
asked for its whole cache). ``stats.degraded`` is the metric; both transitions are logged, and
every record carries it (``cache_state`` UNKNOWN while degraded, the lost gap's CLEARED first).

Undecodable events (``Batch.rejected``) do not stop their batch: they are queued for the
dead-letter topic (``take_rejected``; the shell files them) and the rest is applied. A malformed
*frame* (the whole batch unreadable) is a gap like a missing one: its sequence is requested from
the replay socket, which holds the engine's own copy; only when replay cannot supply it is the gap
lost (CLEARED, degraded).

Records the bridge makes itself (CLEARED at start or after a lost gap) use the bridge's clock and
index 4095. Whatever the clocks say, the ``engine_seq`` a bridge emits is strictly increasing
(at least the previous one + 1): the pipeline applies a worker's events only in that order
(``kvcompass.event_order``), and a lost gap's CLEARED (bridge clock, now) is followed by replayed
batches whose engine timestamps are older.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kvcompass.keys import KeyNamespace, PrefixHasher
from workers.block_table import BlockTable, Change, Op
from workers.protocol import Batch, Rejected

log = logging.getLogger(__name__)
_IDX_BITS = 12
_SEQ_BITS = 10


def _seq(b: Batch) -> int:
    return b.seq


def engine_seq(ts_ms: int, seq: int, index: int) -> int:
    idx = min(index, (1 << _IDX_BITS) - 1)
    return (ts_ms << (_IDX_BITS + _SEQ_BITS)) | ((seq % (1 << _SEQ_BITS)) << _IDX_BITS) | idx


@dataclass(slots=True)
class BridgeStats:
    batches: int = 0
    malformed: int = 0
    rejected_events: int = 0
    duplicates: int = 0
    replays: int = 0
    gaps_recovered: int = 0
    gaps_lost: int = 0
    engine_restarts: int = 0
    records: int = 0
    degraded: bool = False


@dataclass(frozen=True, slots=True)
class Apply:
    records: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class NeedReplay:
    from_seq: int


class RankBridge:
    """Decisions for one DP rank = one worker of the deployment."""

    def __init__(
        self,
        worker_id: int,
        region_id: int,
        namespace: KeyNamespace,
        registration_lengths: Sequence[int],
        relearn_batches: int = 64,
    ) -> None:
        self.worker_id = worker_id
        self.relearn_batches = relearn_batches
        self._clean = 0
        self._last_ts = float("-inf")
        self._last_seq = -1
        self._pending_clear: list[dict[str, Any]] = []
        self.region_id = region_id
        self.namespace = namespace
        self.table = BlockTable(PrefixHasher(namespace), registration_lengths)
        self.expected: int | None = None
        self.stats = BridgeStats()
        self._rejected: list[tuple[int, Rejected]] = []

    # -- records -------------------------------------------------------------------------------

    def _base(self, op: Op, seq_value: int, ts_ms: int) -> dict[str, Any]:
        seq_value = max(seq_value, self._last_seq + 1)
        self._last_seq = seq_value
        return {
            "worker_id": self.worker_id,
            "region_id": self.region_id,
            "model": self.namespace.model_id,
            "sharing_group": self.namespace.sharing_group,
            "op": op.value,
            "tier": "NONE",
            "token_count": 0,
            "token_ids": None,
            "block_hashes": [],
            "parent_block_hash": None,
            "block_size_tokens": 16,
            "registration_lengths": None,
            "registration_keys": None,
            "engine_seq": seq_value,
            "timestamp_ms": ts_ms,
            # every record says whether the index can know this worker (KvEvent v2)
            "cache_state": "UNKNOWN" if self.stats.degraded else "KNOWN",
        }

    def cleared_record(self, now_ms: int) -> dict[str, Any]:
        return self._base(Op.CLEARED, engine_seq(now_ms, 0, (1 << _IDX_BITS) - 1), now_ms)

    def _record(self, ch: Change, batch: Batch, index: int) -> dict[str, Any]:
        ts_ms = int(batch.ts * 1000)
        rec = self._base(ch.op, engine_seq(ts_ms, batch.seq, index), ts_ms)
        if ch.op is Op.CLEARED:
            return rec
        first, last = ch.blocks[0], ch.blocks[-1]
        # Keys only: the pipeline reads registration_keys and nothing else of a keyed event.
        # The prefix's token ids (4 bytes per token) and the page hashes (one Avro long per
        # page) made a 3,840-token event 17 KB and cost ~75 us of Avro decode per event in the
        # rechunk stage, more than its whole per-event budget (pipeline/README.md, "Throughput").
        rec.update(
            tier=ch.tier.name,
            token_count=last.end,
            parent_block_hash=None if first.parent is None else first.parent.block_hash,
            block_size_tokens=int(first.tokens.size),
            registration_lengths=ch.lengths,
            registration_keys=ch.keys,
        )
        if ch.salt is not None:  # keyed in the namespace of the salt's sharing group
            rec["sharing_group"] = ch.salt
        return rec

    # -- sequence discipline -------------------------------------------------------------------

    def start(self, now_ms: int) -> list[dict[str, Any]]:
        """What we knew of this worker before is void: CLEARED, empty table."""
        self.table.clear()
        self.expected = None
        self._last_ts = float("-inf")
        return [self.cleared_record(now_ms)]

    def _apply(self, batch: Batch) -> list[dict[str, Any]]:
        self.stats.batches += 1
        self.stats.rejected_events += len(batch.rejected)
        self._rejected += [(batch.seq, r) for r in batch.rejected]
        ts = self.table.stats
        misses = ts.orphan_blocks + ts.unknown_removed
        changes = self.table.apply(batch.events)
        self.expected = batch.seq + 1
        self._last_ts = max(self._last_ts, batch.ts)
        records = [self._record(c, batch, i) for i, c in enumerate(changes)]
        if self.stats.degraded:
            clean = ts.orphan_blocks + ts.unknown_removed == misses
            self._clean = self._clean + 1 if clean else 0
            if self._clean >= self.relearn_batches:
                self.stats.degraded = False
                log.info(
                    "worker %d: re-learned its cache (%d batches without unknown blocks)",
                    self.worker_id,
                    self._clean,
                )
        self.stats.records += len(records)
        return records

    def offer(self, batch: Batch) -> Apply | NeedReplay:
        """A live batch: apply it, skip it (duplicate), or ask for a replay first."""
        exp = self.expected
        if exp is None or batch.seq == exp:
            return Apply(self._apply(batch))
        if batch.seq < exp:
            # Live duplicates (queued while a replay ran) are never newer than what was applied;
            # a lower sequence with a newer timestamp is a restarted engine.
            if batch.seq == 0 or batch.ts > self._last_ts:
                self.stats.engine_restarts += 1
                log.warning(
                    "worker %d: engine restarted (seq %d after %d)", self.worker_id, batch.seq, exp
                )
                records = self.start(int(batch.ts * 1000))
                if batch.seq == 0:
                    return Apply(records + self._apply(batch))
                self.expected = 0
                self._pending_clear = records
                return NeedReplay(0)
            self.stats.duplicates += 1
            return Apply([])
        return NeedReplay(exp)

    def take_rejected(self) -> list[tuple[int, Rejected]]:
        """(batch seq, event) of every undecodable event applied around since the last call."""
        out, self._rejected = self._rejected, []
        return out

    def malformed(self, seq: int | None) -> NeedReplay | None:
        """A live frame we cannot decode: ask the replay socket for it (from the first batch not
        yet applied). Unknown sequence: nothing to ask; the next good batch shows the gap."""
        self.stats.malformed += 1
        if seq is None or self.expected is None or seq < self.expected:
            return None
        return NeedReplay(self.expected)

    def on_replay(
        self, from_seq: int, batches: Sequence[Batch], now_ms: int
    ) -> list[dict[str, Any]]:
        """Replayed batches from ``from_seq``; a hole at the front means the gap is lost."""
        self.stats.replays += 1
        wanted = sorted({b.seq: b for b in batches if b.seq >= from_seq}.values(), key=_seq)
        out, self._pending_clear = self._pending_clear, []
        lost = from_seq > 0 and (not wanted or wanted[0].seq != from_seq)
        if from_seq == 0 and wanted and wanted[0].seq != 0:
            lost = True  # the engine's buffer no longer starts at its first batch
        run = 0  # batches contiguous from the front; a hole further on is lost too
        while run < len(wanted) and wanted[run].seq == wanted[0].seq + run:
            run += 1
        if not lost and run < len(wanted):
            for b in wanted[:run]:
                if self.expected is None or b.seq >= self.expected:
                    out += self._apply(b)
            from_seq, wanted, lost = wanted[run - 1].seq + 1, wanted[run:], True
        if lost:
            self.stats.gaps_lost += 1
            self.stats.degraded = True
            self._clean = 0
            log.warning(
                "worker %d: events from seq %d are older than the engine's replay buffer "
                "(oldest %s); publishing CLEARED, degraded until it re-learns",
                self.worker_id,
                from_seq,
                wanted[0].seq if wanted else "none",
            )
            out += self.start(now_ms)
        elif wanted and from_seq > 0:
            self.stats.gaps_recovered += 1
        for b in wanted:
            if self.expected is None or b.seq >= self.expected:
                out += self._apply(b)
        return out

    def stats_dict(self) -> dict[str, Any]:
        d = asdict(self.stats)
        d.update({f"table_{k}": v for k, v in asdict(self.table.stats).items()})
        d["table_blocks"] = len(self.table)
        return d
