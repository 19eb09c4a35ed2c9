"""The edge's routing schemes (edge.schemes) against emulated workers in three regions.

Each baseline behaves as its description says: the local cache-aware router follows the longest
local match and never leaves the region; consistent hashing sends a prefix family to its ring
owner (wherever it is) and reads presence at the owner; least-loaded ignores the cache; the
scheme can be switched live through ``/admin/scheme`` and refuses unknown names.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from edge import debug_views
from edge.schemes import EDGE_SCHEMES
from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(60)


async def _served_by(client: Any, tokens: list[int], rid: str) -> int:
    body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 1}}
    r = await client.post("/generate", json=body, headers={"X-Request-Id": rid})
    assert r.status == 200, await r.text()
    await r.read()
    return int(r.headers["X-KVC-Worker"])


async def _set(client: Any, scheme: str) -> None:
    r = await client.post("/admin/scheme", json={"scheme": scheme})
    assert r.status == 200, await r.text()
    assert (await r.json())["scheme"] == scheme


def test_local_cache_aware__follows_local_match_and_stays_in_region() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", scheme="local_cache_aware")
            tokens = ec.prompt(8000, seed=11)
            await ec.prime(c.workers[1], tokens)
            c.register(1, tokens)
            c.register(2, tokens)  # a remote holder too: never used by this scheme
            assert await _served_by(client, tokens, "ca-1") == 1
            # No match above the cache threshold (30% of the prompt): least loaded, still local.
            other = ec.prompt(8000, seed=12)
            assert await _served_by(client, other, "ca-2") in (0, 1)

    asyncio.run(scenario())


def test_local_cache_aware__imbalance_goes_to_least_in_flight() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", scheme="local_cache_aware")
            tokens = ec.prompt(4000, seed=13)
            c.register(1, tokens)
            pol = app.service.schemes
            assert pol is not None
            pol.open_requests[1] = 70  # worker 1 has 70 requests in flight, worker 0 none
            assert await _served_by(client, tokens, "ca-3") == 0
            pol.open_requests[1] = 50  # within balance_abs (64): the holder again
            assert await _served_by(client, tokens, "ca-4") == 1

    asyncio.run(scenario())


def test_consistent_hash__family_goes_to_ring_owner_anywhere() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", scheme="consistent_hash")
            pol = app.service.schemes
            assert pol is not None
            seen: set[int] = set()
            for seed in range(40):
                tokens = ec.prompt(300, seed=100 + seed)
                got = await _served_by(client, tokens, f"ch-{seed}")
                # Nothing held: the owner of the prompt's deepest level on its ring.
                order, claimed = pol.order(
                    "consistent_hash", np.asarray(tokens, np.int32), *_lookup(app, tokens)
                )
                assert got == order[0] and claimed == 0
                seen.add(int(app.service.worker_region[got]))
            assert seen == {0, 1, 2}  # rings span every region

    asyncio.run(scenario())


def test_consistent_hash__uses_the_longest_level_its_owner_holds() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", scheme="consistent_hash")
            pol = app.service.schemes
            assert pol is not None
            tokens = ec.prompt(600, seed=7)
            arr = np.asarray(tokens, np.int32)
            ch = pol.consistent_hash
            owners = ch.rings.owners(app.service.discovery.hasher.keys_at(arr, ch.ladder[:3]))
            c.register(owners[1], tokens, upto=256)  # level-1 owner holds 256 tokens
            got = await _served_by(client, tokens, "ch-hold")
            edge_id = app.client_ids.resolve("ch-hold", None, any_tenant=False)
            assert edge_id is not None  # the decision is kept under the edge's own id
            ex = debug_views.explain(app.service, edge_id)
            assert ex is not None
            assert got == owners[1] and ex["scheme_claimed_tokens"] == 256
            assert ex["scheme"] == "consistent_hash"

    asyncio.run(scenario())


def test_least_loaded__ignores_the_cache() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", scheme="local_least_loaded")
            tokens = ec.prompt(4000, seed=21)
            c.register(1, tokens)
            svc = app.service  # holder 1 is busier
            svc.on_local_loads(np.array([0, 1]), np.array([0.0, 50.0]), svc.clock_ms())
            assert await _served_by(client, tokens, "ll-1") == 0

    asyncio.run(scenario())


def test_admin_scheme_switch__live_and_validated() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", admin=True)
            r = await client.get("/admin/scheme")
            body = await r.json()
            assert body["scheme"] == "kvcompass" and body["schemes"] == list(EDGE_SCHEMES)
            await _set(client, "local_least_loaded")
            assert app.service.scheme == "local_least_loaded"
            r = await client.post("/admin/scheme", json={"scheme": "nope"})
            assert r.status == 400 and "expected one of" in await r.text()
            assert app.service.scheme == "local_least_loaded"
            _, plain = await c.add_edge("eu")  # admin off: the route does not exist
            r = await plain.post("/admin/scheme", json={"scheme": "local_least_loaded"})
            assert r.status in (404, 405)

    asyncio.run(scenario())


def _lookup(app: Any, tokens: list[int]) -> tuple[Any, Any]:
    arr = np.asarray(tokens, np.int32)
    ex = app.service.decide("probe", arr)
    d, lk = ex.decision, ex.lookup
    return lk, d


def test_concurrent_requests_spread__work_counted_at_dispatch_not_at_first_byte(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: the herding guard must see a request's work when it is *sent*. Counting it
    when the worker's response headers arrive (after its whole prefill) let every request
    decided in the meantime pick the same idle-looking worker."""
    import dataclasses

    from workers.emulated.costs import EmulatedCosts

    base = ec.worker_config
    monkeypatch.setattr(
        ec,
        "worker_config",
        lambda: dataclasses.replace(base(), costs=EmulatedCosts(time_scale=0.5)),
    )

    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us")  # two local workers, no loads polling
            got = await asyncio.gather(
                *(_served_by(client, ec.prompt(2000, 300 + i), f"h-{i}") for i in range(4))
            )
            assert sorted(got) == [0, 0, 1, 1], got

    asyncio.run(scenario())
