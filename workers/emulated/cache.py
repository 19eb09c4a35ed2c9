"""The emulated worker's prefix cache: a radix tree over pages, in VRAM and host DRAM.

Owns which pages the emulated engine holds and where, the eviction policy (LRU or LFU), the
engine block hashes, and the KV events each change produces (``workers.protocol`` normal form,
published by ``publisher``). Must not: sleep, publish, or know HTTP. Not the simulator's cache
model (``sim.cluster.store``, chunk ids for every worker in flat arrays, no tokens or events):
its docstring names the differences.

Model (what SGLang's radix cache + HiCache do, reduced to what the events show):
- A node is one full page (``page_size`` tokens); partial tail pages are never cached.
- The VRAM nodes form a prefix-closed subtree: a match that reaches DRAM pages loads them back
  (``BlockStored(GPU)`` + ``BlockRemoved(CPU_PINNED)``), and VRAM evicts only nodes without VRAM
  children.
- VRAM over capacity: the policy's victim is written back to DRAM (``BlockStored(CPU_PINNED)``
  then ``BlockRemoved(GPU)``), or dropped when DRAM capacity is 0. DRAM over capacity: the victim
  among DRAM leaves is dropped (``BlockRemoved(CPU_PINNED)``).
- Pages of the request being admitted are never victims; when nothing else can go, the cache
  runs over capacity until the next admission (engines stall instead; the events stay truthful).
- Block hash of a page: blake2b-64 of (parent hash, page tokens), signed; the root's parent is
  none, or a hash of the request's ``cache_salt``.
- ``cache_salt`` (SGLang 0.5.23's per-request cache namespace, ``RadixKey(extra_key,
  cache_salt)``): one tree per salt; a prompt matches only pages stored under its own salt, so
  ``cached_tokens`` never counts another namespace's pages. ``BlockStored`` carries the salt.
- Eviction: one scan of the tier per admission collects the eligible nodes into a heap
  ordered by (policy rank, time the node entered the tier); a victim's parent that becomes
  eligible joins the heap. That is the same victim sequence as re-scanning for the minimum after
  every eviction, in O(n log n) per admission instead of O(n) per evicted page (the per-page scan
  blocked a worker's event loop for seconds once VRAM held a few thousand pages).
"""

from __future__ import annotations

import hashlib
import heapq
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kvcompass.errors import ConfigError
from kvcompass.types import Tier
from workers.protocol import Cleared, Event, Removed, Stored

GPU, CPU = "GPU", "CPU_PINNED"


def page_hash(parent: int | None, tokens: Sequence[int]) -> int:
    h = hashlib.blake2b(digest_size=8)
    h.update(struct.pack("<q", 0 if parent is None else parent))
    h.update(struct.pack(f"<{len(tokens)}i", *tokens))
    return int.from_bytes(h.digest(), "big", signed=True)


def salt_seed(salt: str | None) -> int | None:
    """The hash a salted tree's first page chains from (SGLang 0.5.23 chains a salted path from
    a salt-derived root hash, ``mem_cache/utils.py``): one tokens, two salts, two hashes."""
    if salt is None:
        return None
    digest = hashlib.blake2b(b"cache-salt\0" + salt.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@dataclass(slots=True, eq=False)
class Node:
    page: tuple[int, ...]
    parent: Node | None
    block_hash: int
    tier: Tier
    last_use: int = 0
    uses: int = 0
    seq: int = 0
    """When the node entered its current tier (ties of the policy rank go to the older)."""
    children: dict[tuple[int, ...], Node] = field(default_factory=dict)
    kv: Any = None
    """The page's KV in tiny-llama mode (a torch tensor, ``tiny_llama`` layout), else None."""
    salt: str | None = None
    """The cache namespace (``cache_salt``) of the tree the node is in."""


@dataclass(frozen=True, slots=True)
class Admission:
    """What one request found and changed."""

    prompt_tokens: int
    device_hit_tokens: int
    host_hit_tokens: int
    new_tokens: int
    events: list[Event]
    reused: tuple[Node, ...] = ()
    fresh: tuple[Node, ...] = ()
    logits: Any = None
    """Last-token logits in tiny-llama mode (set by the engine)."""

    @property
    def cached_tokens(self) -> int:
        return self.device_hit_tokens + self.host_hit_tokens


class PrefixCache:
    """Two-tier page radix tree; every mutation returns the KV events it caused."""

    def __init__(
        self, page_size: int, vram_tokens: int, dram_tokens: int, policy: str = "lru"
    ) -> None:
        if page_size < 1 or vram_tokens < page_size or dram_tokens < 0:
            raise ConfigError(
                f"cache: expected page_size >= 1, vram_tokens >= page_size, dram_tokens >= 0, "
                f"got {page_size}, {vram_tokens}, {dram_tokens}"
            )
        if policy not in ("lru", "lfu"):
            raise ConfigError(f"cache policy: expected 'lru' or 'lfu', got {policy!r}")
        self.page_size = page_size
        self.vram_pages = vram_tokens // page_size
        self.dram_pages = dram_tokens // page_size
        self.policy = policy
        self._roots: dict[str | None, dict[tuple[int, ...], Node]] = {}
        """One tree per cache namespace (request ``cache_salt``; None: unsalted)."""
        self._tier_nodes: dict[Tier, dict[int, Node]] = {Tier.VRAM: {}, Tier.DRAM: {}}
        self._clock = 0
        self._seq = 0

    def usage_tokens(self, tier: Tier) -> int:
        return len(self._tier_nodes[tier]) * self.page_size

    def _pages(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        p = self.page_size
        return [tuple(tokens[i : i + p]) for i in range(0, len(tokens) - p + 1, p)]

    def _root(self, salt: str | None) -> dict[tuple[int, ...], Node]:
        root = self._roots.get(salt)
        if root is None:
            root = self._roots[salt] = {}
        return root

    def _walk(self, pages: list[tuple[int, ...]], salt: str | None) -> list[Node]:
        path: list[Node] = []
        level = self._roots.get(salt, {})
        for page in pages:
            node = level.get(page)
            if node is None:
                break
            path.append(node)
            level = node.children
        return path

    def match(self, tokens: Sequence[int], salt: str | None = None) -> tuple[int, int]:
        """``(device, host)`` tokens of the longest cached prefix in namespace ``salt``;
        changes nothing."""
        path = self._walk(self._pages(tokens), salt)
        dev = sum(1 for n in path if n.tier is Tier.VRAM) * self.page_size
        return dev, len(path) * self.page_size - dev

    def admit(self, tokens: Sequence[int], salt: str | None = None) -> Admission:
        """Serve a prompt: reuse its cached prefix (loading DRAM pages), store the new pages.
        ``salt``: the request's ``cache_salt``; a prompt only ever matches pages of its own."""
        self._clock += 1
        pages = self._pages(tokens)
        path = self._walk(pages, salt)
        events: list[Event] = []
        dev = host = 0
        for node in path:
            node.last_use, node.uses = self._clock, node.uses + 1
            if node.tier is Tier.VRAM:
                dev += self.page_size
                continue
            host += self.page_size
            self._set_tier(node, Tier.VRAM)
            events.append(self._stored([node], GPU))
            events.append(Removed((node.block_hash,), CPU))
        parent = path[-1] if path else None
        fresh: list[Node] = []
        for page in pages[len(path) :]:
            parent_hash = salt_seed(salt) if parent is None else parent.block_hash
            node = Node(page, parent, page_hash(parent_hash, page), Tier.VRAM, salt=salt)
            node.last_use, node.uses = self._clock, 1
            (parent.children if parent else self._root(salt))[page] = node
            self._put(node, Tier.VRAM)
            fresh.append(node)
            parent = node
        if fresh:
            events.append(self._stored(fresh, GPU))
        keep = {id(n) for n in path} | {id(n) for n in fresh}
        events += self._evict(keep)
        new = len(fresh) * self.page_size
        return Admission(len(tokens), dev, host, new, events, tuple(path), tuple(fresh))

    def export(self, tokens: Sequence[int], salt: str | None = None) -> list[Node]:
        """The cached pages of ``tokens``' longest prefix that carry KV tensors."""
        path = self._walk(self._pages(tokens), salt)
        n = next((i for i, node in enumerate(path) if node.kv is None), len(path))
        return path[:n]

    def import_pages(self, tokens: Sequence[int], kvs: Sequence[Any], tier: Tier) -> list[Event]:
        """Insert pages copied from another worker (``kvs[i]`` for page i) without computing;
        pages already held keep their place. Events as for any store."""
        self._clock += 1
        pages = self._pages(tokens)[: len(kvs)]
        path = self._walk(pages, None)
        parent = path[-1] if path else None
        fresh: list[Node] = []
        for i in range(len(path), len(pages)):
            parent_hash = None if parent is None else parent.block_hash
            node = Node(pages[i], parent, page_hash(parent_hash, pages[i]), tier, kv=kvs[i])
            node.last_use, node.uses = self._clock, 1
            (parent.children if parent else self._root(None))[pages[i]] = node
            self._put(node, tier)
            fresh.append(node)
            parent = node
        events: list[Event] = []
        if fresh:
            events.append(self._stored(fresh, GPU if tier is Tier.VRAM else CPU))
        keep = {id(n) for n in path} | {id(n) for n in fresh}
        return events + self._evict(keep)

    def clear(self) -> list[Event]:
        self._roots.clear()
        for nodes in self._tier_nodes.values():
            nodes.clear()
        return [Cleared()]

    # -- internals -----------------------------------------------------------------------------

    def _stored(self, nodes: list[Node], medium: str) -> Stored:
        first = nodes[0]
        toks = tuple(t for n in nodes for t in n.page)
        parent = None if first.parent is None else first.parent.block_hash
        return Stored(tuple(n.block_hash for n in nodes), parent, toks, self.page_size, medium,
                      cache_salt=first.salt)  # fmt: skip

    def _set_tier(self, node: Node, tier: Tier) -> None:
        if node.kv is not None:  # a device <-> host transfer is a copy (torch tensor: clone)
            node.kv = node.kv.clone()
        self._tier_nodes[node.tier].pop(id(node), None)
        self._put(node, tier)

    def _put(self, node: Node, tier: Tier) -> None:
        self._seq += 1
        node.tier, node.seq = tier, self._seq
        self._tier_nodes[tier][id(node)] = node

    def _eligible(self, node: Node, tier: Tier) -> bool:
        """May ``node`` (in ``tier``) leave it: VRAM keeps a prefix-closed subtree."""
        if tier is Tier.VRAM and self.dram_pages > 0:
            return not any(c.tier is Tier.VRAM for c in node.children.values())
        return not node.children

    def _rank(self, node: Node) -> tuple[int, int]:
        return (node.uses, node.last_use) if self.policy == "lfu" else (node.last_use, node.uses)

    def _drop(self, node: Node) -> None:
        self._tier_nodes[node.tier].pop(id(node), None)
        (node.parent.children if node.parent else self._root(node.salt)).pop(node.page, None)

    def _evict(self, keep: set[int]) -> list[Event]:
        events: list[Event] = []
        for tier, limit in ((Tier.VRAM, self.vram_pages), (Tier.DRAM, self.dram_pages)):
            nodes = self._tier_nodes[tier]
            if len(nodes) <= limit:
                continue
            heap = [
                (self._rank(n), n.seq, id(n), n)
                for n in nodes.values()
                if id(n) not in keep and self._eligible(n, tier)
            ]
            heapq.heapify(heap)
            while len(nodes) > limit and heap:
                node = heapq.heappop(heap)[3]
                parent = node.parent
                if tier is Tier.VRAM and self.dram_pages > 0:
                    events.append(self._stored([node], CPU))
                    events.append(Removed((node.block_hash,), GPU))
                    self._set_tier(node, Tier.DRAM)
                else:
                    events.append(Removed((node.block_hash,), GPU if tier is Tier.VRAM else CPU))
                    self._drop(node)
                if (
                    parent is not None
                    and parent.tier is tier
                    and id(parent) not in keep
                    and self._eligible(parent, tier)
                ):
                    heapq.heappush(heap, (self._rank(parent), parent.seq, id(parent), parent))
        return events
