"""Forged relay headers (issue 35 item 5): a client's ``X-KVC-*`` headers are dropped unless a
peer edge signed them with the deployment's relay key (``edge.relay_auth``).

The probe: the prompt is cached on worker 1 (the router's pick); an anonymous client sends it 10
times with ``X-KVC-Forward-To: 0`` (pin worker 0), ``X-KVC-Origin-Region: 1`` (be handed the
region's queue vector as a peer edge would) and a shortlist. Before, 10 of 10 were served on
worker 0, unrouted, each answer carrying ``X-KVC-Queue-Vector``. Now every one is routed (a
decision in ``/debug/explain``, served on worker 1) and none carries a vector. A relay signed
with the key is still served where it says; the same signed relay replayed, or signed for another
body, is not.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from edge.feedback import QUEUE_HEADER
from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(120)


def test_forged_relay_headers__routed_by_the_router_and_no_vector_handed_out() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us")
            tokens = ec.prompt(2048, seed=35)
            await ec.prime(c.workers[1], tokens)
            c.register(1, tokens)
            forged = {"X-KVC-Forward-To": "0", "X-KVC-Origin-Region": "1",
                      "X-KVC-Shortlist": "v1;o=1;r=0;p=2048;l=1;a=inf;z=1;w=0:2048:0"}  # fmt: skip
            body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 2}}
            served = []
            for i in range(10):
                rid = f"forged-{i}"
                r = await client.post("/generate", json=body,
                                      headers={**forged, "X-Request-Id": rid})  # fmt: skip
                assert r.status == 200, await r.text()
                assert QUEUE_HEADER not in r.headers  # no vector for an anonymous client
                served.append(int(r.headers["X-KVC-Worker"]))
                ex = await ec.explain(client, rid)
                assert ex["served_by"] == 1 and ex["claimed_tokens"] > 0  # the router decided
            assert served == [1] * 10
            m = app.service.metrics
            assert m.get("relay_headers_stripped_total", reason="missing") == 10

            # a relay signed with the deployment's key is served where it says, unbooked ...
            raw, hdrs = ec.signed_relay("/generate", body, 0)
            r = await client.post("/generate", data=raw, headers=hdrs)
            assert r.status == 200 and r.headers["X-KVC-Worker"] == "0"
            # ... once: the same signed request again is a replay, routed like a client's
            r = await client.post("/generate", data=raw, headers=hdrs)
            assert r.status == 200 and r.headers["X-KVC-Worker"] == "1"
            assert m.get("relay_headers_stripped_total", reason="replayed") == 1
            # a signature binds the body: another prompt under it is not a relay
            _, hdrs2 = ec.signed_relay("/generate", body, 0)
            other = json.dumps({**body, "sampling_params": {"max_new_tokens": 3}}).encode()
            r = await client.post("/generate", data=other, headers=hdrs2)
            assert r.status == 200 and r.headers["X-KVC-Worker"] == "1"
            assert m.get("relay_headers_stripped_total", reason="bad_signature") == 1
            # and a key that is not the deployment's signs nothing
            stranger = "another-deployments-key-0123456789abcdef"
            raw3, hdrs3 = ec.signed_relay("/generate", body, 0, key=stranger)
            r = await client.post("/generate", data=raw3, headers=hdrs3)
            assert r.status == 200 and r.headers["X-KVC-Worker"] == "1"
            assert m.get("relay_headers_stripped_total", reason="bad_signature") == 2

    asyncio.run(scenario())


def test_relay_between_edges_of_the_deployment__still_served_and_piggybacked() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            eu_app, eu_client = await c.add_edge("eu")
            peer_url = str(eu_client.make_url("")).rstrip("/")
            app, client = await c.add_edge("us", peers={"eu": peer_url})
            tokens = ec.prompt(8000, seed=36)
            await ec.prime(c.workers[2], tokens)
            c.register(2, tokens)
            await ec.generate(client, tokens, "relayed")
            ex = await ec.explain(client, "relayed")
            assert ex["served_by"] == 2 and ex["attempts"] == []
            assert app.service.metrics.get("piggybacks_total", result="ok") == 1
            assert eu_app.service.metrics.total("relay_headers_stripped_total") == 0

    asyncio.run(scenario())
