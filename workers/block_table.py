"""One engine's block table: engine block hashes -> our prefix lengths, keys and tiers.

Owns the per-worker map from engine block hash to the block's place in its prompt (parent link,
own tokens, prefix length), the registration keys the block completes, and the media that hold
it; and the diff of each batch into tier changes of whole blocks. Must not: do I/O, decode frames
or build Avro records (``bridge`` does that), or guess a prefix it cannot rebuild.

Rules (architecture §8):
- A block completes the registration lengths L with ``parent_end < L <= end``; its keys are
  computed once, when it is first stored, from the prefix rebuilt through parent links.
- A store whose parent is unknown is an *orphan*: counted, not stored (its tokens' position in the
  prompt is unknown). Stores chained to an orphan are orphans too.
- The effective tier of a block is VRAM if any GPU copy exists, else DRAM if a CPU copy exists,
  else NONE. A batch is diffed as a whole, so a VRAM->DRAM move published as
  ``BlockStored(CPU_PINNED)`` + ``BlockRemoved(GPU)`` in either order is one TIER_MOVED, and a
  ``BlockRemoved(GPU)`` never drops a CPU copy.
- DISK and EXTERNAL media are not indexed (reloading from them is not what our tiers price).
- A removed block leaves the table, but blocks stored below it keep a reference to it, so their
  descendants can still be rebuilt.
- A block stored with a ``cache_salt`` (SGLang 0.5.23's per-request cache namespace; the edge
  sends a tenant's sharing group as the salt, ``edge/isolation.py``) is keyed in the namespace of
  that sharing group (the table's model and config, ``sharing_group`` = the salt), which is where
  the group's requests are looked up; an unsalted block in the table's own namespace. SGLang
  chains a salted path's hashes from a salt-derived root, so a chain never mixes salts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np
from numpy.typing import NDArray

from kvcompass.keys import PrefixHasher
from kvcompass.types import Tier
from workers.protocol import Cleared, Event, Removed, Stored

MEDIUM_TIER: dict[str, Tier] = {"GPU": Tier.VRAM, "CPU_PINNED": Tier.DRAM, "CPU": Tier.DRAM}
"""Engine medium -> our tier (SGLang says CPU_PINNED, vLLM CPU)."""


class Op(Enum):
    STORED = "STORED"
    TIER_MOVED = "TIER_MOVED"
    REMOVED = "REMOVED"
    CLEARED = "CLEARED"


@dataclass(slots=True, eq=False)
class Block:
    """One engine block (page) the table knows."""

    block_hash: int
    parent: Block | None
    tokens: NDArray[np.int32]
    end: int
    """Prefix length in tokens after this block."""
    lengths: tuple[int, ...]
    keys: tuple[int, ...]
    tiers: set[Tier] = field(default_factory=set)
    salt: str | None = None
    """The engine cache namespace it was stored in (``cache_salt``); None: unsalted."""

    @property
    def tier(self) -> Tier:
        if Tier.VRAM in self.tiers:
            return Tier.VRAM
        return Tier.DRAM if Tier.DRAM in self.tiers else Tier.NONE

    def prefix(self) -> NDArray[np.int32]:
        """Token ids from position 0 through this block."""
        parts: list[NDArray[np.int32]] = []
        node: Block | None = self
        while node is not None:
            parts.append(node.tokens)
            node = node.parent
        return np.concatenate(parts[::-1]) if parts else np.empty(0, np.int32)


@dataclass(frozen=True, slots=True)
class Change:
    """A run of chained blocks whose effective tier changed the same way in one batch."""

    op: Op
    tier: Tier
    blocks: tuple[Block, ...]

    @property
    def token_count(self) -> int:
        return 0 if not self.blocks else self.blocks[-1].end

    @property
    def lengths(self) -> list[int]:
        return [n for b in self.blocks for n in b.lengths]

    @property
    def keys(self) -> list[int]:
        return [k for b in self.blocks for k in b.keys]

    @property
    def salt(self) -> str | None:
        """The ``cache_salt`` of the run (one chain, one salt)."""
        return self.blocks[0].salt if self.blocks else None


@dataclass(slots=True)
class TableStats:
    orphan_blocks: int = 0
    unknown_removed: int = 0
    invalid_tokens: int = 0
    hash_conflicts: int = 0
    """Stores naming a known hash under another parent: engines whose page hash is not chained
    to its prefix (older SGLang: hash of the page's tokens alone) alias repeated pages. The
    rest of such an event is dropped rather than attached at the wrong position."""
    """Blocks whose token ids are outside 0..2**31-1 (our keys hash int32 ids)."""
    unindexed_medium: int = 0
    unindexed_changes: int = 0
    """Block changes that complete no registration length (too short or beyond the last)."""


class BlockTable:
    """Block table of one engine (one DP rank): apply decoded batches, get tier changes."""

    def __init__(self, hasher: PrefixHasher, registration_lengths: Iterable[int]) -> None:
        self._hasher = hasher
        self._salted: dict[str, PrefixHasher] = {}
        self._lengths = np.asarray(sorted(set(int(n) for n in registration_lengths)), np.int64)
        self._blocks: dict[int, Block] = {}
        self.stats = TableStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def get(self, block_hash: int) -> Block | None:
        return self._blocks.get(block_hash)

    def clear(self) -> None:
        self._blocks.clear()

    def _hasher_for(self, salt: str | None) -> PrefixHasher:
        if salt is None:
            return self._hasher
        h = self._salted.get(salt)
        if h is None:
            h = self._salted[salt] = PrefixHasher(
                replace(self._hasher.namespace, sharing_group=salt)
            )
        return h

    def apply(self, events: Iterable[Event]) -> list[Change]:
        """Apply one batch; its net tier changes in event order (CLEARED splits the batch)."""
        out: list[Change] = []
        before: dict[int, tuple[Tier, Block]] = {}
        for ev in events:
            if isinstance(ev, Cleared):
                out += self._diff(before)
                before = {}
                self._blocks.clear()
                out.append(Change(Op.CLEARED, Tier.NONE, ()))
            elif isinstance(ev, Stored):
                self._stored(ev, before)
            elif isinstance(ev, Removed):
                self._removed(ev, before)
        out += self._diff(before)
        return out

    def _touch(self, b: Block, before: dict[int, tuple[Tier, Block]]) -> None:
        if b.block_hash not in before:
            before[b.block_hash] = (b.tier, b)

    def _stored(self, ev: Stored, before: dict[int, tuple[Tier, Block]]) -> None:
        tier = MEDIUM_TIER.get(ev.medium)
        if tier is None:
            self.stats.unindexed_medium += len(ev.block_hashes)
            return
        bs = ev.block_size
        toks = np.asarray(ev.token_ids, dtype=np.int64)
        if toks.size and (int(toks.min()) < 0 or int(toks.max()) > 2**31 - 1):
            self.stats.invalid_tokens += len(ev.block_hashes)
            return
        toks32 = toks.astype(np.int32)
        n = len(ev.block_hashes)
        new_at = next((i for i, h in enumerate(ev.block_hashes) if h not in self._blocks), n)
        # Known blocks only gain a medium; their position was fixed when first stored, so a
        # parent that has left the table since (all its copies gone) does not matter here.
        expected = ev.parent_block_hash
        parent: Block | None = None
        for i, h in enumerate(ev.block_hashes[:new_at]):
            b = self._blocks[h]
            if _parent_hash(b) != expected:
                self.stats.hash_conflicts += n - i
                return
            self._touch(b, before)
            b.tiers.add(tier)
            parent, expected = b, h
        if new_at == 0 and ev.parent_block_hash is not None:
            parent = self._blocks.get(ev.parent_block_hash)
            if parent is None:
                self.stats.orphan_blocks += n
                return
        if new_at >= n:
            return
        start = 0 if parent is None else parent.end
        new_tokens = toks32[new_at * bs :]
        end = start + new_tokens.size
        lo, hi = np.searchsorted(self._lengths, [start, end], side="right")
        lens = self._lengths[lo:hi]
        keys: NDArray[np.uint64] = np.empty(0, np.uint64)
        if lens.size:
            head = parent.prefix() if parent is not None else np.empty(0, np.int32)
            hasher = self._hasher_for(ev.cache_salt)
            keys = hasher.keys_at(np.concatenate([head, new_tokens]), lens)
        # Per new block: the registration lengths it completes, lens[cuts[i - 1]:cuts[i]]; Python
        # lists, so slicing them per block costs no numpy call (this loop is the sidecar's hot
        # path: one iteration per stored page).
        cuts = np.searchsorted(lens, start + bs * np.arange(1, n - new_at + 1), side="right")
        lens_l: list[int] = lens.tolist()
        keys_l: list[int] = keys.tolist()
        cuts_l: list[int] = cuts.tolist()
        j = 0
        for i, h in enumerate(ev.block_hashes[new_at:]):
            b_end = start + (i + 1) * bs
            k0, j = j, cuts_l[i]
            known = self._blocks.get(h)
            if known is not None:  # re-stored mid-chain: keep it, only add the medium
                if _parent_hash(known) != (None if parent is None else parent.block_hash):
                    self.stats.hash_conflicts += n - new_at - i
                    return
                self._touch(known, before)
                known.tiers.add(tier)
                parent = known
                continue
            b = Block(
                h,
                parent,
                new_tokens[i * bs : (i + 1) * bs],  # a view of this event's own int32 copy
                b_end,
                tuple(lens_l[k0:j]),
                tuple(keys_l[k0:j]),
                salt=ev.cache_salt,
            )
            self._touch(b, before)
            b.tiers.add(tier)
            self._blocks[h] = b
            parent = b

    def _removed(self, ev: Removed, before: dict[int, tuple[Tier, Block]]) -> None:
        tier = MEDIUM_TIER.get(ev.medium)
        if tier is None:
            self.stats.unindexed_medium += len(ev.block_hashes)
            return
        for h in ev.block_hashes:
            b = self._blocks.get(h)
            if b is None:
                self.stats.unknown_removed += 1
                continue
            self._touch(b, before)
            b.tiers.discard(tier)
            if not b.tiers:
                del self._blocks[h]

    def _diff(self, before: dict[int, tuple[Tier, Block]]) -> list[Change]:
        out: list[Change] = []
        run: list[Block] = []
        run_key: tuple[Op, Tier] | None = None
        for h, (was, old) in before.items():
            now_block = self._blocks.get(h)
            now = Tier.NONE if now_block is None else now_block.tier
            if was == now:
                continue
            block = old if now_block is None else now_block
            if not block.lengths:
                self.stats.unindexed_changes += 1
                continue
            if was == Tier.NONE:
                key = (Op.STORED, now)
            elif now == Tier.NONE:
                key = (Op.REMOVED, Tier.NONE)
            else:
                key = (Op.TIER_MOVED, now)
            if run and key == run_key and _chained(run[-1], block):
                run.append(block)
                continue
            if run and run_key is not None:
                out.append(Change(run_key[0], run_key[1], tuple(run)))
            run, run_key = [block], key
        if run and run_key is not None:
            out.append(Change(run_key[0], run_key[1], tuple(run)))
        return out


def _parent_hash(b: Block) -> int | None:
    return None if b.parent is None else b.parent.block_hash


def _chained(prev: Block, nxt: Block) -> bool:
    node = nxt.parent
    # Blocks that complete no length sit between indexed ones; walk past them.
    while node is not None and node is not prev and not node.lengths:
        node = node.parent
    return node is prev
