"""Request ids at the edge, over HTTP, against emulated SGLang workers (issue 26 item 7).

The edge mints every request's id (unguessable); a client's ``X-Request-Id`` (or ``/generate``'s
``rid``) is kept beside it, scoped to its tenant, and echoed back; what a worker sees is the
edge's id, so two tenants choosing the same id neither replace each other's ``/debug/explain``
entry nor collide at the worker.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from edge.request_ids import EDGE_ID_HEADER
from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(300)

ADMIN = "admin-token-0123456789"
KEYS = {"acme": "sk-acme-0123456789", "globex": "sk-globex-0123456789"}
TENANTS = {name: {"api_key": key} for name, key in KEYS.items()}
HEX32 = re.compile(r"[0-9a-f]{32}")


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_same_client_id_from_two_tenants__each_keeps_its_own_entry_and_worker_id() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN)
            admin = _bearer(ADMIN)
            edge_ids: dict[str, str] = {}
            for name, seed in (("acme", 1), ("globex", 2)):
                body = {"input_ids": ec.prompt(64, seed), "rid": "dup",
                        "sampling_params": {"max_new_tokens": 1}}  # fmt: skip
                hdrs = {**_bearer(KEYS[name]), "X-Request-Id": "dup"}
                r = await client.post("/generate", json=body, headers=hdrs)
                assert r.status == 200, await r.text()
                assert r.headers["X-Request-Id"] == "dup"  # the client's id, echoed
                edge_ids[name] = r.headers[EDGE_ID_HEADER]
                assert HEX32.fullmatch(edge_ids[name])
                # the worker's rid is the edge's id, not the client's "dup"
                assert (await r.json())["meta_info"]["id"] == edge_ids[name]
            assert edge_ids["acme"] != edge_ids["globex"]
            r = await client.get("/debug/explain/dup", headers=admin)
            assert r.status == 409 and (await r.json())["error"]["param"] == "tenant"
            for name in ("acme", "globex"):
                r = await client.get(f"/debug/explain/dup?tenant={name}", headers=admin)
                ex = await r.json()
                assert r.status == 200, ex
                assert (ex["request_id"], ex["tenant"], ex["client_request_id"]) == (
                    edge_ids[name], name, "dup")  # fmt: skip
                r = await client.get(f"/debug/explain/{edge_ids[name]}", headers=admin)
                assert (await r.json())["client_request_id"] == "dup"

    asyncio.run(scenario())


def test_openai_requests__worker_gets_the_edge_id_and_a_clients_rid_is_replaced() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us")
            seen: set[str] = set()
            for i in range(20):
                body: dict[str, Any] = {"model": ec.MODEL, "prompt": "hello", "max_tokens": 1}
                if i % 2:
                    body["rid"] = body["request_id"] = "mine"  # SGLang's and vLLM's id fields
                r = await client.post("/v1/completions", json=body)
                assert r.status == 200, await r.text()
                edge_id = r.headers[EDGE_ID_HEADER]
                assert r.headers["X-Request-Id"] == edge_id  # no client id: the edge's
                assert (await r.json())["id"] == "cmpl-" + edge_id  # the worker saw the edge id
                seen.add(edge_id)
            assert len(seen) == 20 and all(HEX32.fullmatch(s) for s in seen)
            assert len({s[:8] for s in seen}) > 1  # no shared, echoed prefix to guess from

    asyncio.run(scenario())
