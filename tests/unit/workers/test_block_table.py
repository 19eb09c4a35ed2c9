"""Block table: prefixes rebuilt through parent links, keys at the lengths a block completes,
batch-level tier diffs (VRAM->DRAM in either order), orphans counted, CPU copies kept."""

from __future__ import annotations

import numpy as np

from kvcompass.keys import KeyNamespace, PrefixHasher, prompt_key
from kvcompass.types import Tier
from workers.block_table import BlockTable, Op
from workers.protocol import Cleared, Removed, Stored

NS = KeyNamespace("test-model")
TOKENS = np.arange(100, 132, dtype=np.int32)  # 8 blocks of 4


def _table() -> BlockTable:
    return BlockTable(PrefixHasher(NS), [8, 16, 24])


def _stored(first: int, n: int, parent: int | None, medium: str = "GPU") -> Stored:
    toks = tuple(int(t) for t in TOKENS[first * 4 : (first + n) * 4])
    return Stored(tuple(range(first + 1, first + n + 1)), parent, toks, 4, medium)


def test_root_chain_registers_completed_lengths__keys_match_prompt_key() -> None:
    t = _table()
    (ch,) = t.apply([_stored(0, 4, None)])
    assert ch.op is Op.STORED and ch.tier is Tier.VRAM
    assert ch.lengths == [8, 16] and ch.token_count == 16
    assert ch.keys == [prompt_key(NS, TOKENS, 8), prompt_key(NS, TOKENS, 16)]


def test_child_store_rebuilds_prefix_through_parent__key_at_24() -> None:
    t = _table()
    t.apply([_stored(0, 4, None)])
    (ch,) = t.apply([_stored(4, 2, 4)])
    assert ch.lengths == [24] and ch.keys == [prompt_key(NS, TOKENS, 24)]
    np.testing.assert_array_equal(ch.blocks[-1].prefix(), TOKENS[:24])


def test_store_with_unknown_parent_is_counted_not_guessed__orphan() -> None:
    t = _table()
    assert t.apply([_stored(4, 2, 999)]) == []
    assert t.stats.orphan_blocks == 2 and len(t) == 0


def test_vram_to_dram_move_is_one_tier_moved__either_order() -> None:
    for order in ("stored-first", "removed-first"):
        t = _table()
        t.apply([_stored(0, 2, None)])
        moved, gone = _stored(0, 2, None, "CPU_PINNED"), Removed((1, 2), "GPU")
        events = [moved, gone] if order == "stored-first" else [gone, moved]
        (ch,) = t.apply(events)
        assert (ch.op, ch.tier, ch.lengths) == (Op.TIER_MOVED, Tier.DRAM, [8]), order


def test_gpu_removal_keeps_cpu_copy__then_cpu_removal_removes() -> None:
    t = _table()
    t.apply([_stored(0, 2, None)])
    t.apply([_stored(0, 2, None, "CPU_PINNED")])
    (ch,) = t.apply([Removed((1, 2), "GPU")])
    assert (ch.op, ch.tier) == (Op.TIER_MOVED, Tier.DRAM)
    assert t.get(2) is not None
    (ch,) = t.apply([Removed((1, 2), "CPU_PINNED")])
    assert (ch.op, ch.tier, ch.keys) == (Op.REMOVED, Tier.NONE, [prompt_key(NS, TOKENS, 8)])
    assert len(t) == 0


def test_children_survive_parent_removal__grandchild_keys_still_exact() -> None:
    t = BlockTable(PrefixHasher(NS), [8, 16, 24, 32])
    t.apply([_stored(0, 4, None)])
    t.apply([_stored(4, 2, 4)])
    t.apply([Removed((1, 2, 3, 4), "GPU")])
    assert t.get(4) is None
    (ch,) = t.apply([_stored(6, 2, 6)])
    assert ch.lengths == [32] and ch.keys == [prompt_key(NS, TOKENS, 32)]


def test_clear_event_empties_table__cleared_change() -> None:
    t = _table()
    t.apply([_stored(0, 2, None)])
    changes = t.apply([Cleared(), _stored(0, 2, None)])
    assert [c.op for c in changes] == [Op.CLEARED, Op.STORED]
    assert len(t) == 2


def test_disk_medium_is_not_indexed__counted() -> None:
    t = _table()
    assert t.apply([_stored(0, 2, None, "DISK")]) == []
    assert t.stats.unindexed_medium == 2


def test_known_hash_under_other_parent_is_a_conflict__not_moved() -> None:
    t = _table()
    t.apply([_stored(0, 2, None)])  # hashes 1, 2
    alias = Stored((2, 9), 1_000, tuple(int(x) for x in TOKENS[:8]), 4, "CPU_PINNED")
    t.apply([Stored((1_000,), None, tuple(int(x) for x in TOKENS[8:12]), 4, "GPU"), alias])
    assert t.stats.hash_conflicts == 2
    assert t.get(2).tiers == {Tier.VRAM} and t.get(9) is None  # type: ignore[union-attr]


def test_dram_copy_of_block_whose_parent_left_is_kept__known_hashes() -> None:
    t = _table()
    t.apply([_stored(0, 2, None)])
    t.apply([_stored(2, 2, 2)])  # blocks 3, 4 below 2
    t.apply([Removed((1, 2), "GPU")])  # parents gone, children stay
    (ch,) = t.apply([_stored(2, 2, 2, "CPU_PINNED"), Removed((3, 4), "GPU")])
    assert (ch.op, ch.tier, ch.lengths) == (Op.TIER_MOVED, Tier.DRAM, [16])
    assert t.stats.orphan_blocks == 0 and t.stats.hash_conflicts == 0
