"""The edge runs the one decider (issue 25): feedback at the first byte, route-and-reserve.

Against emulated SGLang workers behind real edges (in-memory views, emulated WAN):

* back to back: prompt B = prompt A + 3 tokens, sent the moment A's answer is back, goes to A's
  worker and reuses A's prefix, every time (before the decider, 13 of 20 such pairs went to the
  other worker with 0 cached tokens: A's worker was still charged A's prefill and nothing marked
  A's prefix as held there);
* a relay carries the origin's shortlist; the owning region's edge books its pick (explained
  there as ``relayed_for``) and retires it at the first byte;
* an owner whose booking is worse than the origin's alternative refuses with its vector; the
  origin folds the vector in, decides once more, finally, and serves elsewhere.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(90)


def test_back_to_back_turns__the_second_goes_where_the_first_left_its_prefix() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", only_workers=[0, 1])
            svc = app.service
            svc.on_local_loads(np.array([0, 1]), np.array([0.0, 0.0]), svc.clock_ms())
            for i in range(20):
                a = ec.prompt(1500, seed=100 + i)
                await ec.generate(client, a, f"a-{i}")
                served = (await ec.explain(client, f"a-{i}"))["served_by"]
                out = await ec.generate(client, [*a, 7, 8, 9], f"b-{i}")
                ex = await ec.explain(client, f"b-{i}")
                assert ex["served_by"] == served, (i, ex["candidates"][:2])
                assert out["meta_info"]["cached_tokens"] > 0
                assert ex["reused_tokens"] == out["meta_info"]["cached_tokens"]
            assert svc.decider.open_forwards() == 0  # every forward ended in the decider

    asyncio.run(scenario())


def test_relay__owner_books_its_pick_and_retires_it_at_the_first_byte() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            eu_app, eu_client = await c.add_edge("eu")
            eu = eu_app.service
            eu.on_local_loads(np.array([2]), np.array([0.0]), eu.clock_ms())
            peer = str(eu_client.make_url("")).rstrip("/")
            app, client = await c.add_edge("us", peers={"eu": peer})
            tokens = ec.prompt(8000, seed=5)
            await ec.prime(c.workers[2], tokens)
            c.register(2, tokens)
            out = await ec.generate(client, tokens, "r-book")
            ex = await ec.explain(client, "r-book")
            assert ex["served_by"] == 2 and ex["relay_region"] == 1
            assert ex["reuse_tokens"]["captured"] == ex["reuse_tokens"]["reusable"] == 7552
            assert ex["reuse_tokens"]["forgone_wan"] == 0
            assert ex["reused_tokens"] == out["meta_info"]["cached_tokens"] > 0
            # the origin relays under its own edge id, which is the owner's client id for it
            owner = await ec.explain(eu_client, ex["request_id"])
            assert owner["relayed_for"] == 0 and owner["served_by"] == 2
            assert eu.metrics.get("relays_total", result="accepted") == 1
            booking = eu.decider.booking
            assert booking is not None and booking.open_forwards(2) == 0
            assert eu.decider.open_forwards() == 0 and app.service.decider.open_forwards() == 0

    asyncio.run(scenario())


def test_relay__busy_owner_refuses_with_its_vector_and_the_origin_serves_nearer() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            eu_app, eu_client = await c.add_edge("eu")
            eu = eu_app.service
            eu.on_local_loads(np.array([2]), np.array([600_000.0]), eu.clock_ms())  # 10 min
            peer = str(eu_client.make_url("")).rstrip("/")
            app, client = await c.add_edge("us", peers={"eu": peer})
            svc = app.service
            svc.on_local_loads(np.array([0, 1]), np.array([0.0, 0.0]), svc.clock_ms())
            tokens = ec.prompt(8000, seed=6)
            await ec.prime(c.workers[2], tokens)
            c.register(2, tokens)
            await ec.generate(client, tokens, "r-refused")
            ex = await ec.explain(client, "r-refused")
            assert ex["refused_by"] == 1 and ex["served_by"] in (0, 1)
            # the split says it: eu's 7,552-token holder passed over for a recompute nearer
            split = ex["reuse_tokens"]
            assert split["reusable"] == 7552 and split["forgone_wan"] == 7552 - split["captured"]
            assert ex["attempts"][0] == {"worker": 2, "refused": True}
            assert eu.metrics.get("relays_total", result="refused") == 1
            assert svc.metrics.total("refusals_total") == 1
            # the refusal's vector taught the origin eu's queue: worker 2 is not picked again
            await ec.generate(client, tokens, "r-after")
            again = await ec.explain(client, "r-after")
            assert again["winner"] in (0, 1) and again["refused_by"] == -1
            assert svc.decider.open_forwards() == 0

    asyncio.run(scenario())


def test_no_booking_scheme__the_origin_sends_straight_to_its_pick_and_nobody_books() -> None:
    """``kvcompass_no_booking`` (the ablation the demo's burst run compares): the same holder
    wins, but the relay carries no shortlist, so the owner serves the named worker unbooked;
    switching back books again, and neither decider is left with an open forward."""

    async def scenario() -> None:
        async with ec.cluster() as c:
            eu_app, eu_client = await c.add_edge("eu")
            eu = eu_app.service
            peer = str(eu_client.make_url("")).rstrip("/")
            app, client = await c.add_edge("us", peers={"eu": peer})
            svc = app.service
            for s in (svc, eu):
                s.set_scheme("kvcompass_no_booking")
            eu.on_local_loads(np.array([2]), np.array([0.0]), eu.clock_ms())
            assert eu.deciders["kvcompass"].open_forwards() == 0  # the fact reached both
            tokens = ec.prompt(8000, seed=7)
            await ec.prime(c.workers[2], tokens)
            c.register(2, tokens)
            await ec.generate(client, tokens, "r-plain")
            ex = await ec.explain(client, "r-plain")
            assert ex["scheme"] == "kvcompass_no_booking"
            assert ex["served_by"] == 2 and ex["relay_region"] == -1
            assert eu.metrics.total("relays_total") == 0  # served unbooked at the owner
            for s in (svc, eu):
                s.set_scheme("kvcompass")
            await ec.generate(client, tokens, "r-booked")
            ex = await ec.explain(client, "r-booked")
            assert ex["scheme"] == "kvcompass" and ex["relay_region"] == 1
            assert eu.metrics.get("relays_total", result="accepted") == 1
            for s in (svc, eu):
                assert all(d.open_forwards() == 0 for d in s.deciders.values())

    asyncio.run(scenario())
