"""Emulated prefix cache: truthful hits per tier, capacities respected, policy order, and its
events, fed to the bridge's block table, always reproduce the cache's own tier of every page."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.types import Tier
from workers.block_table import BlockTable
from workers.emulated.cache import PrefixCache
from workers.protocol import Stored, decode_payload, encode_payload


def test_shared_prefix_hits_in_vram__second_request() -> None:
    c = PrefixCache(4, 64, 0)
    assert c.admit(list(range(10))).cached_tokens == 0
    adm = c.admit([*range(8), 99, 98, 97, 96])
    assert (adm.device_hit_tokens, adm.host_hit_tokens, adm.new_tokens) == (8, 0, 4)


def test_cache_salt__a_prompt_reuses_only_pages_of_its_own_salt() -> None:
    c = PrefixCache(4, 64, 0)
    secret = list(range(12))
    first = c.admit(secret, "acme")
    assert c.admit(secret, "globex").cached_tokens == 0  # same tokens, another namespace
    assert c.admit(secret).cached_tokens == 0  # nor unsalted
    assert c.admit(secret, "acme").cached_tokens == 12  # its own group keeps its reuse
    assert c.match(secret[:8], "globex") == (8, 0) and c.match(secret[:8], "initech") == (0, 0)
    stored = [e for e in first.events if isinstance(e, Stored)]
    assert stored and all(e.cache_salt == "acme" for e in stored)
    other = [e for e in c.admit(list(range(12)), "x").events if isinstance(e, Stored)]
    assert set(other[0].block_hashes).isdisjoint(stored[0].block_hashes)  # hashes differ too


def test_cache_salt__salted_pages_evict_and_clear_like_any() -> None:
    c = PrefixCache(4, 8, 0)
    c.admit([1] * 8, "a")
    c.admit([2] * 8, "b")  # VRAM holds 8 tokens: a's pages go
    assert c.match([1] * 8, "a") == (0, 0) and c.match([2] * 8, "b") == (8, 0)
    c.clear()
    assert c.match([2] * 8, "b") == (0, 0)


def test_salted_events__keyed_in_the_salts_sharing_group_namespace() -> None:
    """Through the wire (encode, decode) into the sidecar's block table: pages stored under
    ``cache_salt`` "acme" get the keys the edge looks acme's requests up with (the table's
    model and config, sharing group "acme"); unsalted pages the table's own namespace."""
    c = PrefixCache(4, 64, 0)
    table = BlockTable(PrefixHasher(KeyNamespace("m", "cfg")), [8, 12])
    tokens = list(range(12))
    for seq, salt in enumerate(("acme", None)):
        events = decode_payload(seq, encode_payload(c.admit(tokens, salt).events, 0, 0.0)).events
        (change,) = table.apply(events)
        ns = KeyNamespace("m", "cfg", salt)
        want = PrefixHasher(ns).keys_at(np.asarray(tokens, np.int32), np.asarray([8, 12]))
        assert change.salt == salt and change.keys == want.tolist()


def test_vram_overflow_moves_lru_page_to_dram__then_reloads_on_hit() -> None:
    c = PrefixCache(4, 8, 8)
    c.admit([1, 2, 3, 4, 5, 6, 7, 8])
    c.admit([9, 9, 9, 9, 8, 8, 8, 8])
    assert c.usage_tokens(Tier.VRAM) == 8 and c.usage_tokens(Tier.DRAM) == 8
    adm = c.admit([1, 2, 3, 4, 5, 6, 7, 8])
    assert (adm.device_hit_tokens, adm.host_hit_tokens) == (0, 8)
    assert c.match([9, 9, 9, 9, 8, 8, 8, 8]) == (0, 8)


def test_lfu_keeps_frequent_prefix__lru_would_not() -> None:
    hot, cold, new = [1] * 4, [2] * 4, [3] * 4
    for policy, survivor in (("lfu", hot), ("lru", cold)):
        c = PrefixCache(4, 8, 0, policy)
        for _ in range(3):
            c.admit(hot)
        c.admit(cold)
        c.admit(new)
        assert c.match(survivor) == (4, 0), policy


def test_dram_overflow_drops_pages__no_capacity_exceeded() -> None:
    c = PrefixCache(2, 4, 4)
    for i in range(10):
        c.admit([i, i, i, i])
    assert c.usage_tokens(Tier.VRAM) <= 4 and c.usage_tokens(Tier.DRAM) <= 4


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 2), min_size=0, max_size=12), max_size=25),
    vram=st.integers(1, 6),
    dram=st.integers(0, 6),
    policy=st.sampled_from(["lru", "lfu"]),
)
def test_events_replayed_into_block_table_match_cache_tiers__any_workload(
    prompts: list[list[int]], vram: int, dram: int, policy: str
) -> None:
    c = PrefixCache(2, 2 * vram, 2 * dram, policy)
    table = BlockTable(PrefixHasher(KeyNamespace("m")), range(2, 40, 2))
    for seq, p in enumerate(prompts):
        adm = c.admit(p)
        table.apply(decode_payload(seq, encode_payload(adm.events, 0, 0.0)).events)
        nodes = [n for t in (Tier.VRAM, Tier.DRAM) for n in c._tier_nodes[t].values()]
        assert len(table) == len(nodes)
        for n in nodes:
            b = table.get(n.block_hash)
            assert b is not None and b.tier is n.tier
    assert table.stats.orphan_blocks == 0 and table.stats.unknown_removed == 0


class _ScanCache(PrefixCache):
    """The readable twin of eviction: re-scan the tier for the policy's minimum eligible node
    after every eviction (ties to the node that entered the tier first)."""

    def _evict(self, keep: set[int]) -> list:  # type: ignore[type-arg]
        from workers.emulated.cache import CPU, GPU
        from workers.protocol import Removed

        events: list = []  # type: ignore[type-arg]
        for tier, limit in ((Tier.VRAM, self.vram_pages), (Tier.DRAM, self.dram_pages)):
            while len(self._tier_nodes[tier]) > limit:
                cands = [
                    n
                    for n in self._tier_nodes[tier].values()
                    if id(n) not in keep and self._eligible(n, tier)
                ]
                if not cands:
                    break
                node = min(cands, key=lambda n: (self._rank(n), n.seq))
                if tier is Tier.VRAM and self.dram_pages > 0:
                    events += [self._stored([node], CPU), Removed((node.block_hash,), GPU)]
                    self._set_tier(node, Tier.DRAM)
                else:
                    events.append(Removed((node.block_hash,), GPU if tier is Tier.VRAM else CPU))
                    self._drop(node)
        return events


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=40), min_size=1, max_size=30),
    vram=st.integers(1, 6),
    dram=st.integers(0, 8),
    policy=st.sampled_from(["lru", "lfu"]),
)
def test_heap_eviction__same_events_as_rescanning_twin(
    prompts: list[list[int]], vram: int, dram: int, policy: str
) -> None:
    fast, twin = (
        PrefixCache(4, 4 * vram, 4 * dram, policy),
        _ScanCache(4, 4 * vram, 4 * dram, policy),
    )
    for p in prompts:
        a, b = fast.admit(p), twin.admit(p)
        assert a.events == b.events
        assert (a.device_hit_tokens, a.host_hit_tokens) == (b.device_hit_tokens, b.host_hit_tokens)
