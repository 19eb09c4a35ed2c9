"""Baselines as their authors describe them (issue 14 item 2): each behaviour that could fail.

Central Directory (delayed views and its in-flight count), the hash rings' placement, Dynamo's
continuous in-region events, SkyWalker's late binding and the Oracle pair, on the fake context
of ``tests/sim/baseline_fakes.py``.
"""

from __future__ import annotations

import pytest

from sim.schemes.base import HELD
from sim.schemes.central_directory import CentralDirectory, CentralDirectoryNoBooking
from sim.schemes.chord import Chord
from sim.schemes.consistent_hash import ConsistentHash
from sim.schemes.dynamo import Dynamo
from sim.schemes.oracle import Oracle
from sim.schemes.oracle_ideal import OracleIdeal
from sim.schemes.skywalker import SkyWalker
from tests.sim.baseline_fakes import FakeContext, respond, store, three_regions

LONG = list(range(1, 129))  # 128 chunks of 64 tokens: 8192 tokens, 819 ms of prefill at β 0.1


# -- Central Directory ----------------------------------------------------------------------------


def test_central_directory__learns_a_remote_holder_one_way_late() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    cd = CentralDirectory(ctx)
    assert cd.place.region == 0
    warm = ctx.requests.add(LONG, origin=1)
    store(cd, ctx, 4, warm, 10.0)  # worker 4 (region b, 100 ms from the directory) holds it
    probe = ctx.requests.add([*LONG, 999], origin=0)
    before = cd.route(probe, 105.0)  # the event reaches the directory at 110 ms
    assert before.claimed_tokens == 0 and before.worker != 4
    after = cd.route(ctx.requests.add([*LONG, 999], origin=0), 111.0)  # the same prompt again
    assert (after.worker, after.claimed_tokens) == (4, 8192)


def test_central_directory__queue_state_only_from_reports() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    cd = CentralDirectory(ctx)
    warm = ctx.requests.add(LONG, origin=0)
    store(cd, ctx, 2, warm, 0.0)
    cd.start()
    ctx.loads.start()
    ctx.loop.run_until(5.0)  # the poll taken at 0.5 ms (everyone idle) has reached the directory
    ctx.cluster.backlog[2] = 5000.0  # worker 2 becomes busy after that poll
    probe = ctx.requests.add([*LONG, 7], origin=0)
    assert cd.route(probe, 50.0).worker == 2  # the directory cannot know yet
    # Next poll: leaves at 101 ms, answered at 101.5, at the edge at 102, the directory 102.5;
    # a query leaving the edge at t is decided at the directory at t + 0.5.
    ctx.loop.run_until(101.9)
    assert cd.route(ctx.requests.add([*LONG, 8], origin=0), 101.9).worker == 2
    ctx.loop.run_until(102.0)
    assert cd.route(ctx.requests.add([*LONG, 9], origin=0), 102.0).worker != 2


def test_central_directory__counts_its_own_forwards_until_a_report_includes_them() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    cd = CentralDirectory(ctx)
    cd.start()
    ctx.loop.run_until(0.0)
    burst = [ctx.requests.add([500 + i, 600 + i, 700 + i], origin=0) for i in range(4)]
    picks = [cd.route(r, 1.0).worker for r in burst]
    # Cold prompts, idle reports: only the directory's count of its forwards spreads them.
    assert len(set(picks)) == 4
    assert all(int(ctx.cluster.worker_region[w]) == 0 for w in picks)


# -- consistent hashing / Chord -------------------------------------------------------------------


def test_hash_rings__a_miss_lands_at_its_deepest_ring_and_that_ring_hits_later() -> None:
    ctx = FakeContext(three_regions())
    ch = ConsistentHash(ctx)
    short = ctx.requests.add([1, 2, 3, 4], origin=0)  # 256 tokens: levels 128 and 256
    owner1 = ch.owner(1, int(ctx.requests.nodes_of(short)[ch.level_depth[1]]))
    miss = ch.route(short, 0.0)
    assert (miss.worker, miss.extra["level"]) == (owner1, -1.0)
    store(ch, ctx, owner1, short, 0.0)
    longer = ctx.requests.add([1, 2, 3, 4, 50, 51, 52, 53], origin=0)  # adds level 512
    hit = ch.route(longer, 1000.0)
    assert (hit.worker, hit.claimed_tokens, hit.extra["level"]) == (owner1, 256, 1.0)


def test_hash_rings__levels_on_the_chunk_grid__every_ring_can_hit() -> None:
    ctx = FakeContext(three_regions())
    ctx.cluster.chunk_tokens = 512
    ch = ConsistentHash(ctx)
    assert ch.level_tokens == [512, 1024, 2048, 4096, 8192, 16384]
    assert ch.level_depth == [0, 1, 3, 7, 15, 31]
    chord = Chord(ctx)
    assert chord.level_tokens == ch.level_tokens


def test_hash_rings__short_prompt_stays_local_on_the_least_busy_worker() -> None:
    ctx = FakeContext(three_regions(workers=(4, 2, 2)))
    ch = ConsistentHash(ctx)
    tiny = [ctx.requests.add([900 + i], origin=0) for i in range(4)]  # 64 tokens: no ring key
    picks = [ch.route(r, 0.0).worker for r in tiny]
    assert sorted(picks) == [0, 1, 2, 3]  # one each: the edge counts its own forwards
    respond(ch, ctx, tiny[0], picks[0], 10.0)
    again = ctx.requests.add([999], origin=0)
    assert ch.route(again, 11.0).worker == picks[0]


# -- Oracle pair ----------------------------------------------------------------------------------


def test_oracle_ideal__lowest_predicted_ttft_with_exact_state() -> None:
    ctx = FakeContext(three_regions(wan=100.0), exact=True)
    oi = OracleIdeal(ctx)
    req = ctx.requests.add(LONG, origin=0)
    ctx.cluster.held[4].update(ctx.requests.nodes_of(req).tolist())  # remote holder, region b
    route = oi.route(req, 0.0)  # 819 ms of prefill saved > 200 ms round trip
    assert (route.worker, route.claimed_tokens, route.lookup_ms) == (4, 8192, 0.0)
    ctx.cluster.backlog[4] = 1000.0  # now the saving no longer pays for its queue
    assert oi.route(ctx.requests.add(LONG, origin=0), 1.0).worker != 4


def test_oracle__least_loaded_ignores_the_cache() -> None:
    ctx = FakeContext(three_regions(wan=100.0), exact=True)
    req = ctx.requests.add(LONG, origin=0)
    oracle = Oracle(ctx)
    ctx.cluster.held[1].update(ctx.requests.nodes_of(req).tolist())
    ctx.cluster.backlog[:] = 5.0
    ctx.cluster.backlog[3] = 0.0
    assert oracle.route(req, 0.0).worker == 3  # the least loaded, not the holder


# -- Dynamo ---------------------------------------------------------------------------------------


def test_dynamo__in_region_events_count_after_one_hop_without_a_broadcast() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    dy = Dynamo(ctx)  # start() never called: no broadcast at all
    warm = ctx.requests.add([1, 2, 3, 4], origin=0)
    store(dy, ctx, 2, warm, 10.0)
    hop = ctx.network.one_way_ms(0, 0)
    probe = ctx.requests.add([1, 2, 3, 4, 5], origin=0)
    assert dy.route(probe, 10.0 + hop / 2).claimed_tokens == 0
    late = dy.route(ctx.requests.add([1, 2, 3, 4, 6], origin=0), 10.0 + hop)
    assert (late.worker, late.claimed_tokens) == (2, 256)


def test_dynamo__decode_blocks_do_not_move_a_request_the_cost_model_would_not() -> None:
    ctx = FakeContext(three_regions(wan=100.0, workers=(2, 1, 1)))
    dy = Dynamo(ctx)
    warm = ctx.requests.add([1, 2, 3, 4], origin=0)
    store(dy, ctx, 1, warm, 0.0)
    dy.own_decode[0, 1] = 1000.0  # long streams on worker 1: decode never delays a prefill
    req = ctx.requests.add([1, 2, 3, 4, 5], origin=0)
    assert dy.route(req, 1.0).worker == 1


# -- SkyWalker ------------------------------------------------------------------------------------


def test_skywalker__waits_in_the_balancer_and_binds_to_the_replica_that_frees() -> None:
    ctx = FakeContext(three_regions(wan=100.0, workers=(2, 1, 1)))
    sw = SkyWalker(ctx)
    first = [ctx.requests.add([10 + i], origin=0) for i in range(2)]
    assert sorted(sw.route(r, 0.0).worker for r in first) == [0, 1]
    warm = ctx.requests.add([1, 2, 3], origin=0)
    store(sw, ctx, 0, warm, 0.0)  # worker 0 has the prefix, but it is busy
    waiting = ctx.requests.add([1, 2, 3, 4], origin=0)
    assert sw.route(waiting, 1.0).worker == HELD  # no replica available: not committed
    respond(sw, ctx, first[1], 1, 300.0)  # worker 1 frees first
    assert [(req, r.worker, at, frm) for req, r, at, frm in ctx.dispatched] == [
        (waiting, 1, 300.0, 0)
    ]
    assert sw.outstanding.tolist()[:2] == [1, 1]


def test_central_directory__keeps_a_forward_a_later_report_leaves_out() -> None:
    # Issue 34: the directory keeps what it dispatched until it learns the first token; a
    # report taken after the forward landed (SGLang's waiting tokens leave the running prefill
    # out) only raises the estimate.
    ctx = FakeContext(three_regions(wan=100.0))
    cd = CentralDirectory(ctx)
    cd.start()
    ctx.loads.start()
    ctx.loop.run_until(5.0)
    req = ctx.requests.add(LONG, origin=0)
    w = cd.route(req, 5.0).worker  # 819 ms of predicted work, reaches w at ~6 ms
    drain = 6.0 + cd._queues(6.0)[w]  # it lands at 6.5 ms (edge -> directory -> edge -> w)
    assert drain == pytest.approx(6.5 + 819.2)
    ctx.cluster.backlog[w] = 0.0  # w reports nothing waiting: its one prefill is running
    ctx.loop.run_until(110.0)  # the poll taken at 101.5 ms has reached the directory
    assert cd._queues(110.0)[w] == pytest.approx(drain - 110.0)


def test_central_directory_no_booking__a_report_taken_after_arrival_replaces_the_count() -> None:
    ctx = FakeContext(three_regions(wan=100.0))
    cd = CentralDirectoryNoBooking(ctx)
    cd.start()
    ctx.loads.start()
    ctx.loop.run_until(5.0)
    req = ctx.requests.add(LONG, origin=0)
    w = cd.route(req, 5.0).worker  # 819 ms of predicted work, reaches w at ~6 ms
    assert cd._queues(6.0)[w] == pytest.approx(819.2)
    ctx.cluster.backlog[w] = 300.0  # what w will report (the engine's truth here)
    ctx.loop.run_until(110.0)  # the poll taken at 101.5 ms has reached the directory
    assert cd._queues(110.0)[w] == pytest.approx(300.0 - (110.0 - 101.5))
