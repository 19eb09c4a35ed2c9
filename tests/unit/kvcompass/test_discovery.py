"""One edge's full decision on the paper's testbed: the index answer feeds the joint score."""

from __future__ import annotations

import numpy as np

from kvcompass.discovery import EdgeDiscovery
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.router import Router
from kvcompass.types import Tier
from wire.deployments import load_deployment

DEP = load_deployment("paper-testbed-14x3")  # US 0-7, EU 8-9, Asia 10-13
LEVELS = Levels.from_deployment(DEP)
HASHER = PrefixHasher(KeyNamespace(model_id="test-model"))


def _setup() -> tuple[DiscoveryIndex, IndexView, EdgeDiscovery]:
    layout = TableLayout.for_regions([r.n_workers for r in DEP.regions])
    index = DiscoveryIndex(layout, n_shards=2, initial_capacity=256)
    view = IndexView(layout, LEVELS.matrix, 2)
    view.apply_all(index.full_images())
    edge = EdgeDiscovery(0, HASHER, view, Router.from_deployment(DEP, LEVELS, 0))
    return index, view, edge


def _register(index: DiscoveryIndex, view: IndexView, worker: int, tokens: np.ndarray) -> None:
    reg = LEVELS.registration_lengths(int(DEP.worker_region[worker]))
    reg = reg[reg <= tokens.size]
    view.apply_all(index.register(worker, HASHER.keys_at(tokens, reg), Tier.VRAM))


def test_remote_holder_beyond_n1_wins__idle_pool() -> None:
    index, view, edge = _setup()
    prompt = np.random.default_rng(1).integers(0, 50_000, size=12_000, dtype=np.int32)
    _register(index, view, 9, prompt)  # an EU worker holds all 12K tokens
    decision, found = edge.decide(prompt, now_ms=0.0)
    assert found.match.matched_tokens[9] >= LEVELS.n1(0, 1)
    assert decision.worker == 9
    assert decision.claimed_tokens == found.match.matched_tokens[9]


def test_remote_holder_below_n1_loses_to_local_recompute__short_prompt() -> None:
    index, view, edge = _setup()
    n1 = LEVELS.n1(0, 1)
    prompt = np.random.default_rng(2).integers(0, 50_000, size=n1 - 16, dtype=np.int32)
    _register(index, view, 9, prompt)
    decision, found = edge.decide(prompt, now_ms=0.0)
    assert found.match.matched_tokens[9] == 0  # never queried below n1 toward EU
    assert DEP.worker_region[decision.worker] == 0


def test_local_holder_is_found_at_in_region_levels__shared_prefix() -> None:
    index, view, edge = _setup()
    rng = np.random.default_rng(3)
    prefix = rng.integers(0, 50_000, size=1024, dtype=np.int32)
    _register(index, view, 5, prefix)
    prompt = np.concatenate([prefix, rng.integers(0, 50_000, size=300, dtype=np.int32)])
    decision, found = edge.decide(prompt, now_ms=0.0)
    assert found.match.matched_tokens[5] == 1024
    assert decision.worker == 5
    assert found.family_key == int(HASHER.keys_at(prompt, LEVELS.query_union(0)[:1])[0])


def test_prompt_shorter_than_every_level_matches_nothing__tiny_prompt() -> None:
    _, _, edge = _setup()
    found = edge.lookup(np.arange(10, dtype=np.int32))
    assert found.keys.size == 0 and not found.match.matched_tokens.any()
