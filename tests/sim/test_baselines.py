"""The six baseline schemes: unit behaviours on a fake context (tests/sim/baseline_fakes.py)."""

from __future__ import annotations

import numpy as np
import pytest

from kvcompass.deployment import builtin_deployment
from kvcompass.mix import splitmix64
from sim.schemes._holders import HolderHistory
from sim.schemes.base import HELD, CacheEventBatch
from sim.schemes.central_directory_ideal import CentralDirectoryIdeal as CentralDirectory
from sim.schemes.chord import Chord
from sim.schemes.consistent_hash import ConsistentHash
from sim.schemes.dynamo import Dynamo
from sim.schemes.planetserve import PlanetServe
from sim.schemes.skywalker import SkyWalker
from tests.sim.baseline_fakes import _NO, _NO_NODES, FakeContext, respond, store, three_regions

# -- HolderHistory ------------------------------------------------------------------------------


def test_holder_history_reads_the_past__flips_after_cutoff_are_undone() -> None:
    hist = HolderHistory(np.array([0, 1], dtype=np.int64), horizon_ms=1000.0)
    nodes = np.array([11, 12], dtype=np.int64)
    hist.apply(CacheEventBatch(1, 100.0, _NO, 1, _NO, _NO, _NO, nodes, _NO_NODES))
    hist.apply(CacheEventBatch(1, 300.0, _NO, 1, _NO, _NO, _NO, _NO_NODES, nodes[1:]))
    assert hist.mask(11, None) == 0b10 and hist.mask(12, None) == 0
    assert hist.mask(12, [0.0, 200.0]) == 0b10  # region 1 as of t=200: still held
    assert hist.mask(12, [0.0, 50.0]) == 0  # before it was stored
    out = np.zeros(2, dtype=np.int64)
    assert hist.match([11, 12], 0b11, [0.0, 200.0], out) == 2
    assert out.tolist() == [0, 2]


# -- consistent hashing / Chord -------------------------------------------------------------------


def test_consistent_hash_same_prefix_same_worker__hot_family_concentrates() -> None:
    ctx = FakeContext(three_regions())
    ch = ConsistentHash(ctx)
    # 40 requests of one family (same 4 chunks = 256 tokens), different suffixes, all regions.
    reqs = [ctx.requests.add([1, 2, 3, 4, 100 + i, 200 + i], origin=i % 3) for i in range(40)]
    first = ch.route(reqs[0], 0.0).worker
    store(ch, ctx, first, reqs[0], 1.0)
    chosen = {ch.route(r, 1000.0).worker for r in reqs[1:]}
    assert chosen == {first}
    # A different family lands on its deepest level's designated owner, whatever the load.
    other = ctx.requests.add([9, 8, 7, 6], origin=0)  # 256 tokens: levels 128 and 256
    assert ch.route(other, 1000.0).worker == ch.owner(
        1, int(ctx.requests.nodes_of(other)[ch.level_depth[1]])
    )


def test_consistent_hash_presence__learned_one_way_late() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    ch = ConsistentHash(ctx)
    labels = list(range(1, 9))  # 512 tokens: levels 128, 256, 512
    probe = ctx.requests.add(labels, origin=0)
    owner3 = ch.owner(2, int(ctx.requests.nodes_of(probe)[ch.level_depth[2]]))
    region = int(ctx.cluster.worker_region[owner3])
    if region == 0:  # ask from another region so the announcement crosses the WAN
        probe = ctx.requests.add(labels, origin=1)
    store(ch, ctx, owner3, probe, 0.0)
    delay = ctx.network.one_way_ms(region, int(ctx.requests.origin[probe]))
    assert delay == 100.0
    early = ch.route(probe, delay - 1.0)
    assert early.claimed_tokens < 512
    hit = ch.route(probe, delay + 1.0)
    assert (hit.worker, hit.claimed_tokens) == (owner3, 512)


def test_chord_lookup_latency__sum_of_hop_latencies_grows_with_wan() -> None:
    costs = []
    for wan in (10.0, 100.0):
        ctx = FakeContext(three_regions(wan=wan))
        chord = Chord(ctx)
        req = ctx.requests.add(list(range(1, 65)), origin=1)  # 4096 tokens: all six levels
        costs.append(chord.route(req, 0.0).lookup_ms)
        # Recompute by hand: the slowest of the six parallel lookups.
        ctx2 = FakeContext(three_regions(wan=wan))
        chord2 = Chord(ctx2)
        ctx2.requests.add(list(range(1, 65)), origin=1)
        chunks = ctx2.requests.nodes_of(0)
        worst = 0.0
        nodes = chord2.region_nodes[1]
        for j, depth in enumerate(chord2.level_depth):
            key = int(chunks[depth])
            hops = chord2.path(nodes[j % len(nodes)], splitmix64(key, chord2.seeds[j]))
            regions = [chord2.worker_region[chord2.node_worker[h]] for h in hops]
            t = ctx2.network.one_way_ms(1, regions[0])
            for a, b, ra, rb in zip(hops, hops[1:], regions, regions[1:], strict=False):
                if chord2.node_worker[a] != chord2.node_worker[b]:
                    t += ctx2.network.one_way_ms(ra, rb)
            worst = max(worst, t + ctx2.network.one_way_ms(regions[-1], 1))
            assert chord2.node_worker[hops[-1]] == chord2.owner(j, key)
        assert costs[-1] == pytest.approx(worst)
    assert costs[1] > costs[0] > 0.0


def test_chord_path__reaches_the_successor_in_log_hops() -> None:
    dep = builtin_deployment("paper-64x8")
    ctx = FakeContext(dep)
    chord = Chord(ctx)
    n = len(chord.ids)
    hops = []
    for k in range(200):
        ident = splitmix64(k, 99)
        path = chord.path(k % n, ident)
        assert path[-1] == chord._successor(ident)
        hops.append(len(path) - 1)
    assert max(hops) <= 2 * n.bit_length()


# -- central directory ----------------------------------------------------------------------------


def test_central_directory_pays_one_round_trip__to_the_directory_region() -> None:
    ctx = FakeContext(three_regions(wan=100.0), exact=True)
    for o in (0, 1, 2, 1):
        ctx.requests.add([1, 2, 3], origin=o)
    cd = CentralDirectory(ctx)
    assert cd.place.region == 0  # region a is 100 ms from both others; b and c are 200 apart
    for req in range(4):
        o = int(ctx.requests.origin[req])
        assert cd.route(req, 0.0).lookup_ms == pytest.approx(2 * ctx.network.one_way_ms(o, 0))


def test_central_directory_exact_state__holder_unless_its_queue_outweighs_the_reuse() -> None:
    ctx = FakeContext(three_regions(wan=100.0), exact=True)
    req = ctx.requests.add(list(range(1, 33)), origin=0)  # 2048 tokens: 204.8 ms of prefill
    ctx.cluster.held[2].update(ctx.requests.nodes_of(req).tolist())
    cd = CentralDirectory(ctx)
    route = cd.route(req, 0.0)
    assert (route.worker, route.claimed_tokens) == (2, 2048)
    ctx.cluster.backlog[2] = 5000.0
    assert cd.route(req, 1.0).worker != 2


# -- SkyWalker ------------------------------------------------------------------------------------


def test_skywalker_keeps_requests_local__until_a_remote_replica_reports_an_empty_queue() -> None:
    ctx = FakeContext(three_regions(wan=100.0, workers=(1, 2, 2)))
    sw = SkyWalker(ctx)
    reqs = [ctx.requests.add([i, i + 1], origin=0) for i in range(1, 6)]
    assert sw.route(reqs[0], 0.0).worker == 0  # the only local replica, free
    # Local replica busy and no probe heard yet: the request waits in the local LB.
    assert sw.route(reqs[1], 0.0).worker == HELD
    sw.start()
    ctx.loop.run_until(99.0)  # probes sent at t=0 are still on the wire
    assert sw.route(reqs[2], 99.0).worker == HELD
    assert not ctx.dispatched
    ctx.loop.run_until(101.0)  # probes from b and c (100 ms away) landed: both have 2 free
    # The two waiting requests were pushed to b (nearest; tie with c -> b), the next goes to c.
    assert sw.route(reqs[3], 101.0).worker == HELD
    ctx.loop.run_until(400.0)
    sent = {
        req: (int(ctx.cluster.worker_region[r.worker]), frm) for req, r, _, frm in ctx.dispatched
    }
    assert sent == {reqs[1]: (1, 1), reqs[2]: (1, 1), reqs[3]: (2, 2)}
    # Once the local replica's request has returned, it is available again: locality first.
    respond(sw, ctx, reqs[0], 0, 402.0)
    assert sw.route(reqs[4], 403.0).worker == 0


def test_skywalker_local_choice__longest_prefix_among_free_replicas() -> None:
    ctx = FakeContext(three_regions(workers=(3, 1, 1)))
    sw = SkyWalker(ctx)
    warm = ctx.requests.add([5, 6, 7, 8], origin=0)
    store(sw, ctx, 2, warm, 0.0)
    again = ctx.requests.add([5, 6, 7, 8, 9], origin=0)
    route = sw.route(again, 1.0)
    assert (route.worker, route.claimed_tokens) == (2, 256)


# -- Dynamo ---------------------------------------------------------------------------------------


def test_dynamo_routes_on_a_stale_view__until_the_next_broadcast_lands() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    dy = Dynamo(ctx)
    dy.start()
    # A long prompt cached on a remote worker (region b): worth the 200 ms round trip.
    warm = ctx.requests.add(list(range(1, 129)), origin=1)  # 8192 tokens
    remote = 4  # first worker of region b
    store(dy, ctx, remote, warm, 10.0)
    probe = ctx.requests.add([*range(1, 129), 999], origin=0)
    ctx.loop.run_until(150.0)  # broadcast at 100 ms lands at 200 ms in region a
    before = dy.route(probe, 150.0)
    assert int(ctx.cluster.worker_region[before.worker]) == 0 and before.claimed_tokens == 0
    ctx.loop.run_until(201.0)
    after = dy.route(probe, 201.0)
    assert (after.worker, after.claimed_tokens) == (remote, 8192)


def test_dynamo_cost__load_moves_a_request_off_the_best_overlap() -> None:
    ctx = FakeContext(three_regions(wan=100.0, workers=(2, 1, 1)))
    dy = Dynamo(ctx)
    warm = ctx.requests.add([1, 2, 3, 4], origin=0)
    store(dy, ctx, 1, warm, 0.0)
    same = [ctx.requests.add([1, 2, 3, 4, 10 + i], origin=0) for i in range(12)]
    picks = [dy.route(r, 1.0).worker for r in same]
    assert picks[0] == 1  # overlap wins while loads are equal
    assert 0 in picks  # active prefill blocks on worker 1 eventually outweigh 4 blocks of overlap


# -- PlanetServe ----------------------------------------------------------------------------------


def test_planetserve_deepest_holder__and_fallback_when_it_is_slow() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    ps = PlanetServe(ctx)
    warm = ctx.requests.add([1, 2, 3, 4], origin=0)
    store(ps, ctx, 3, warm, 0.0)
    req = ctx.requests.add([1, 2, 3, 4, 5], origin=0)
    first = ps.route(req, 1.0)
    assert (first.worker, first.claimed_tokens) == (3, 256)
    # Worker 3 becomes the slowest of many observed workers: the fallback moves the request.
    for w in range(ctx.cluster.n_workers):
        probe = ctx.requests.add([50 + w], origin=0)
        respond(ps, ctx, probe, w, 5000.0 if w == 3 else 100.0 + w)
    moved = ps.route(req, 2.0)
    assert moved.worker != 3
    assert moved.worker == int(np.argmin(np.where(ps.factor > 0, ps.factor, np.inf)))


def test_central_directory_in_flight_work__spreads_a_burst_over_idle_workers() -> None:
    ctx = FakeContext(three_regions(wan=100.0), exact=True)
    burst = [ctx.requests.add([500 + i, 600 + i, 700 + i], origin=0) for i in range(4)]
    cd = CentralDirectory(ctx)
    picks = [cd.route(r, 0.0).worker for r in burst]
    # Cold prompts, idle cluster: without the in-flight term all four would pick one worker.
    assert len(set(picks)) == 4
    assert all(int(ctx.cluster.worker_region[w]) == 0 for w in picks)


def test_planetserve_miss__stays_in_the_origin_region() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    ps = PlanetServe(ctx)
    for o in (0, 1, 2):
        for k in range(10):
            req = ctx.requests.add([1000 * (o + 1) + k], origin=o)
            assert int(ctx.cluster.worker_region[ps.route(req, 0.0).worker]) == o


def test_chord_virtual_nodes__every_worker_owns_a_share_of_the_ring() -> None:
    ctx = FakeContext(builtin_deployment("paper-64x8"))
    chord = Chord(ctx)
    assert len(chord.ids) == ctx.cluster.n_workers * chord.virtual
    owners = np.bincount(
        [chord.owner(0, splitmix64(k, 5)) for k in range(20000)], minlength=ctx.cluster.n_workers
    )
    assert owners.min() > 0 and owners.max() < 5 * owners.mean()


def test_dynamo_decode_blocks__released_when_the_stream_ends() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    dy = Dynamo(ctx)
    req = ctx.requests.add([1, 2, 3, 4], origin=0, output=11)
    w = dy.route(req, 0.0).worker
    assert dy.own_prefill[0, w] == 4 and dy.own_decode[0, w] == 4
    respond(dy, ctx, req, w, 50.0)  # first token: prefill blocks released
    assert dy.own_prefill[0, w] == 0 and dy.own_decode[0, w] == 4
    end = 50.0 + 10 * ctx.config.decode_ms_per_token
    ctx.loop.run_until(end - 1.0)
    assert dy.own_decode[0, w] == 4
    ctx.loop.run_until(end)
    assert dy.own_decode[0, w] == 0


def test_skywalker_push__remote_lb_picks_its_longest_prefix_free_replica() -> None:
    ctx = FakeContext(three_regions(wan=100.0, workers=(1, 3, 1)))
    sw = SkyWalker(ctx)
    warm = ctx.requests.add([7, 8, 9], origin=1)
    store(sw, ctx, 3, warm, 0.0)  # worker 3 = third replica of region b
    busy = ctx.requests.add([1], origin=0)
    assert sw.route(busy, 0.0).worker == 0
    sw.start()
    ctx.loop.run_until(150.0)
    req = ctx.requests.add([7, 8, 9, 10], origin=0)
    assert sw.route(req, 150.0).worker == HELD  # pushed: it reaches b's LB 100 ms later
    ctx.loop.run_until(400.0)
    ((got, route, at, frm),) = ctx.dispatched
    assert (got, route.worker, route.claimed_tokens, frm) == (req, 3, 192, 1)
    assert at == pytest.approx(250.0, abs=15.0)


def test_dynamo_broadcast_period__follows_the_runs_router_config() -> None:
    from kvcompass.router.config import RouterConfig

    ctx = FakeContext(three_regions())
    assert Dynamo(ctx).period_ms == 100.0
    ctx.router_config = RouterConfig(broadcast_period_ms=40.0)
    dy = Dynamo(ctx)
    dy.start()
    ctx.loop.run_until(130.0)
    assert dy.period_ms == 40.0
    assert (
        sum(ctx.network.sent.values()) == 3 * 6
    )  # broadcasts at 40, 80, 120 ms; 3 regions x 2 peers
