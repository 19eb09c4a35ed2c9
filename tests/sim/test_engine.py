"""Engine pieces: event order, the chunk-cache kernels vs their twin, request keys, metrics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass.errors import InvalidInputError
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.levels import Levels
from kvcompass.types import Tier
from sim.cluster import kernels as k
from sim.cluster.store import CacheStore
from sim.engine.loop import EventLoop
from sim.engine.requests import MODEL_CONFIG, MODEL_ID, Requests
from sim.metrics import load_factor_matrix, peak_load_factor
from tests import naive
from tests.sim._tiny import path, two_regions, workload


def test_events_fire_in_time_priority_then_fifo_order__on_ties() -> None:
    loop = EventLoop()
    fired: list[str] = []
    loop.schedule(5.0, lambda t, a: fired.append(a), "late", 1)
    loop.schedule(1.0, lambda t, a: fired.append(a), "b", 5)
    loop.schedule(1.0, lambda t, a: fired.append(a), "a", 2)
    loop.schedule(1.0, lambda t, a: fired.append(a), "c", 5)
    loop.run_until(2.0)
    assert fired == ["a", "b", "c"]
    assert loop.now_ms == 2.0
    loop.run_all()
    assert fired[-1] == "late"


def test_schedule_in_the_past__is_refused() -> None:
    loop = EventLoop()
    loop.run_until(10.0)
    with pytest.raises(InvalidInputError):
        loop.schedule(5.0, lambda t, a: None)


def _paths(draw: st.DrawFn) -> list[list[int]]:
    n = draw(st.integers(2, 12))
    out: list[list[int]] = []
    for i in range(n):
        if out and draw(st.booleans()):
            base = out[draw(st.integers(0, len(out) - 1))]
            base = base[: draw(st.integers(0, len(base)))]
        else:
            base = []
        own = [1_000_000 * (i + 1) + j for j in range(draw(st.integers(1, 6)))]
        out.append(base + own)
    return out


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    policy=st.sampled_from(["lru", "lfu", "fifo"]),
    vram=st.integers(1, 12),
    dram=st.integers(0, 10),
)
def test_cache_kernels__match_the_python_twin(
    data: st.DataObject, policy: str, vram: int, dram: int
) -> None:
    paths = data.draw(st.composite(lambda draw: _paths(draw))())
    store = CacheStore(2, vram, dram, policy, max(len(p) for p in paths))
    twins = [naive.ChunkCacheTwin(vram, dram, policy) for _ in range(2)]
    ops = data.draw(
        st.lists(st.tuples(st.integers(0, 1), st.integers(0, len(paths) - 1), st.booleans()),
                 min_size=1, max_size=40)
    )  # fmt: skip
    for step, (w, p, place) in enumerate(ops):
        chunks = paths[p]
        change = naive.ChunkChange()
        if place:
            held_twin = twins[w].place(chunks, step, Tier.DRAM, change)
            held, _, n = store.serve(w, np.array(chunks, dtype=np.int64), step, Tier.DRAM, False)
            assert held == held_twin
        else:
            got_twin = twins[w].serve(chunks, step, change)
            m, d, n = store.serve(w, np.array(chunks, dtype=np.int64), step)
            assert (m, d) == got_twin
        kinds, ids = store.o_kind[:n], store.o_chunk[:n]
        for code, items in (
            (k.STORED, change.stored),
            (k.PROMOTED, change.promoted),
            (k.DEMOTED, change.demoted),
            (k.REMOVED, change.removed),
        ):
            assert sorted(ids[kinds == code].tolist()) == sorted(x[0] for x in items)
        for ww in range(2):
            assert store.held(ww) == len(twins[ww])
            # prefix-closed: every held chunk's parent on any path is held too
            for q in paths:
                held_flags = [twins[ww].tier_of(c) > 0 for c in q]
                assert held_flags == sorted(held_flags, reverse=True)


def test_cache_store__grows_its_rows_without_changing_behaviour() -> None:
    rng = np.random.default_rng(3)
    store = CacheStore(2, 200, 300, "lru", 12, initial_rows=16)
    twins = [naive.ChunkCacheTwin(200, 300, "lru") for _ in range(2)]
    paths = [
        [int(x) for x in rng.integers(1, 1 << 40, int(rng.integers(1, 13)))] for _ in range(400)
    ]
    for step in range(1500):
        w, p = int(rng.integers(2)), paths[int(rng.integers(len(paths)))]
        got = store.serve(w, np.array(p, dtype=np.int64), step)[:2]
        assert got == twins[w].serve(p, step, None)
    assert store.pool > 16
    assert [store.held(w) for w in range(2)] == [len(t) for t in twins]


def test_request_keys__equal_the_hasher_at_every_indexed_length() -> None:
    dep = two_regions()
    levels = Levels.from_deployment(dep)
    wl = workload([path(1, 300, 0, 3), path(1, 100, 1, 1)], [0.0, 1.0], [0, 1])
    req = Requests(wl, levels, 64, batch=1)
    hasher = PrefixHasher(KeyNamespace(model_id=MODEL_ID, model_config=MODEL_CONFIG))
    for i in range(2):
        lengths, keys = req.keys_of(i)
        longer = req.lengths[lengths.size :]
        assert lengths[-1] <= wl.prompt_len[i]
        assert longer.size == 0 or longer[0] > wl.prompt_len[i]
        assert np.array_equal(keys, hasher.keys_at(wl.tokens_of(i), lengths))
    # shared prefix -> equal keys at shared lengths, and equal chunk ids
    _, ka = req.keys_of(0)
    lb, kb = req.keys_of(1)
    shared = lb <= 100 * 16
    assert np.array_equal(ka[: shared.sum()], kb[shared])
    assert req.nodes_of(0)[:25].tolist() == req.nodes_of(1)[:25].tolist()


def test_changes_keys__are_the_owner_keys_at_the_region_registration_lengths() -> None:
    dep = two_regions()
    levels = Levels.from_deployment(dep)
    wl = workload([path(1, 300, 0, 3)], [0.0], [0])
    req = Requests(wl, levels, 64)
    depths = np.arange(req.nodes_of(0).size, dtype=np.int64)
    for region in (0, 1):
        regions = np.full_like(depths, region)
        keys, item = req.keys_for_changes(np.zeros_like(depths), depths, regions)
        lengths, all_keys = req.keys_of(0)
        want = np.isin(lengths, levels.registration_lengths(region)) & (lengths <= depths.size * 64)
        assert np.array_equal(keys, all_keys[want])
        assert np.array_equal(item, (lengths[want] - 1) // 64)


def test_load_factor__is_one_for_an_even_split_and_peaks_on_a_hot_worker() -> None:
    w = np.array([0, 1, 2, 3, 0, 0], dtype=np.int64)
    at = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    gpu = np.ones(6)
    f = load_factor_matrix(w, at, gpu, 4, bin_ms=1000.0)
    assert f.shape == (1, 4)
    assert np.allclose(f[0], [3 / 1.5, 1 / 1.5, 1 / 1.5, 1 / 1.5])
    assert peak_load_factor(f) == pytest.approx(2.0)
    even = load_factor_matrix(w[:4], at[:4], gpu[:4], 4, bin_ms=1000.0)
    assert peak_load_factor(even) == pytest.approx(1.0)
