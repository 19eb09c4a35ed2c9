"""Several models and tenants behind one edge, over HTTP, against emulated SGLang workers.

Issue 17 item 2: the request's ``model`` picks the key namespace and the workers; the API key
(``Authorization: Bearer``) picks the tenant's sharing-group salt. Two models never match each
other's prefixes, two tenants never do unless they share a group; a missing or unknown key gets
401, the debug and admin endpoints 401/403 without the admin token (OpenAI error shape, request
id echoed). Registrations are made in the namespace a sidecar of that pool would use.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from kvcompass.keys import KeyNamespace
from tests.integration import edge_cluster as ec
from workers.bridge import Apply, RankBridge
from workers.protocol import decode_payload, encode_payload

pytestmark = pytest.mark.timeout(300)

OTHER = "other-model"
ADMIN = "admin-token-0123456789"
KEYS = {"acme": "sk-acme-0123456789", "initech": "sk-initech-0123456789",
        "globex": "sk-globex-0123456789"}  # fmt: skip
TENANTS = {
    "acme": {"api_key": KEYS["acme"]},  # sharing group "acme" (its name)
    "initech": {"api_key": KEYS["initech"], "sharing_group": "acme"},
    "globex": {"api_key": KEYS["globex"]},
}
MODELS = {ec.MODEL: {"workers": [0, 2, 3]}, OTHER: {"model_config": "fp8", "workers": [1]}}


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _generate(
    client: Any, tokens: list[int], rid: str, headers: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 2}, **extra}
    r = await client.post("/generate", json=body, headers={"X-Request-Id": rid, **(headers or {})})
    assert r.status == 200, await r.text()
    out: dict[str, Any] = await r.json()
    return out


async def _explain(client: Any, rid: str, headers: dict[str, str] | None = None) -> Any:
    r = await client.get(f"/debug/explain/{rid}", headers=headers or {})
    assert r.status == 200, await r.text()
    return await r.json()


def test_two_models__never_match_each_others_prefixes_and_keep_to_their_workers() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", models=MODELS)
            a, b = ec.prompt(2048, seed=11), ec.prompt(2048, seed=12)
            await ec.prime(c.workers[0], a)
            c.register(0, a, namespace=KeyNamespace(ec.MODEL))
            c.register(1, b, namespace=KeyNamespace(OTHER, "fp8"))
            await _generate(client, a, "m-a", model=ec.MODEL)
            ex = await _explain(client, "m-a")
            assert ex["winner"] == 0 and ex["claimed_tokens"] > 0
            await _generate(client, a, "m-a-other", model=OTHER)  # a's prefix, other model
            ex = await _explain(client, "m-a-other")
            assert ex["served_by"] == 1 and ex["claimed_tokens"] == 0
            await _generate(client, b, "m-b")  # no model: the default, whose workers lack 1
            ex = await _explain(client, "m-b")
            assert ex["claimed_tokens"] == 0 and ex["served_by"] in (0, 2, 3)
            await _generate(client, b, "m-b-other", model=OTHER)
            ex = await _explain(client, "m-b-other")
            assert ex["served_by"] == 1 and ex["claimed_tokens"] > 0
            r = await client.post("/v1/completions", json={"model": "nope", "prompt": "hi"},
                                  headers={"X-Request-Id": "m-404"})  # fmt: skip
            err = (await r.json())["error"]
            assert r.status == 404 and err["code"] == "model_not_found"
            assert err["request_id"] == "m-404" == r.headers["X-Request-Id"]
            models = await (await client.get("/v1/models")).json()
            assert [m["id"] for m in models["data"]] == [ec.MODEL, OTHER]

    run(scenario())


def test_two_tenants__never_match_each_others_prefixes_unless_they_share_a_group() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN)
            tokens = ec.prompt(2048, seed=13)
            await ec.prime(c.workers[0], tokens)
            c.register(0, tokens, namespace=KeyNamespace(ec.MODEL, "", "acme"))
            admin = _bearer(ADMIN)
            for name, hit in (("acme", True), ("initech", True), ("globex", False)):
                await _generate(client, tokens, f"t-{name}", _bearer(KEYS[name]))
                ex = await _explain(client, f"t-{name}", admin)
                assert (ex["claimed_tokens"] > 0) is hit, (name, ex["claimed_tokens"])
            lookup = await client.post("/debug/lookup", json={"input_ids": tokens},
                                       headers=admin)  # fmt: skip
            assert lookup.status == 200  # the default, unsalted namespace: nobody's prefixes
            assert (await lookup.json())["holders"] == []
            for name, holders in (("acme", [0]), ("initech", [0]), ("globex", [])):
                r = await client.post("/debug/lookup", headers=admin,
                                      json={"input_ids": tokens, "tenant": name})  # fmt: skip
                assert [h["worker"] for h in (await r.json())["holders"]] == holders, name
            r = await client.get("/debug/lookup?text=hi&tenant=nobody", headers=admin)
            assert r.status == 400 and (await r.json())["error"]["param"] == "tenant"

    run(scenario())


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer sk-unknown-0123456789"}, {"Authorization": KEYS["acme"]},
     {"Authorization": f"Bearer {ADMIN}"}],
)  # fmt: skip
def test_request_without_a_valid_key__401_openai_shape(headers: dict[str, str]) -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN)
            body = {"model": ec.MODEL, "prompt": "hello", "max_tokens": 2}
            for path in ("/v1/completions", "/v1/chat/completions", "/generate"):
                r = await client.post(path, json=body, headers={"X-Request-Id": "k-1", **headers})
                out = await r.json()
                assert r.status == 401, (path, out)
                assert set(out["error"]) == {"message", "type", "param", "code", "request_id"}
                assert out["error"]["code"] == "invalid_api_key"
                assert out["error"]["request_id"] == "k-1" == r.headers["X-Request-Id"]
            r = await client.get("/v1/models", headers=headers)
            assert r.status == 401
            assert app.service.metrics.total("decisions_total") == 0  # never looked up

    run(scenario())


def test_admin_and_debug_endpoints__401_without_403_with_a_wrong_token() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN, admin=True)
            await _generate(client, ec.prompt(64, seed=14), "a-1", _bearer(KEYS["acme"]))
            calls = [("GET", "/debug/explain/a-1"), ("GET", "/debug/lookup?text=hi"),
                     ("GET", "/admin/scheme")]  # fmt: skip
            for method, path in calls:
                r = await client.request(method, path)
                assert r.status == 401, path
                assert (await r.json())["error"]["request_id"] == r.headers["X-Request-Id"]
                r = await client.request(method, path, headers=_bearer(KEYS["acme"]))
                assert r.status == 403, path
                r = await client.request(method, path, headers=_bearer(ADMIN))
                assert r.status == 200, path
            r = await client.post("/admin/scheme", json={"scheme": "local_least_loaded"},
                                  headers=_bearer(KEYS["globex"]))  # fmt: skip
            assert r.status == 403
            r = await client.get("/admin/scheme", headers=_bearer(ADMIN))
            assert (await r.json())["scheme"] == "kvcompass"  # the tenant switched nothing

    run(scenario())


def test_relayed_request__peer_edge_authenticates_the_tenant_again() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            eu_app, eu_client = await c.add_edge("eu", tenants=TENANTS, admin_token=ADMIN)
            peer_url = str(eu_client.make_url("")).rstrip("/")
            _, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN,
                                         peers={"eu": peer_url})  # fmt: skip
            tokens = ec.prompt(8000, seed=15)  # beyond n1(us→eu): worth the WAN
            await ec.prime(c.workers[2], tokens)
            c.register(2, tokens, namespace=KeyNamespace(ec.MODEL, "", "acme"))
            await _generate(client, tokens, "relay-acme", _bearer(KEYS["acme"]))
            ex = await _explain(client, "relay-acme", _bearer(ADMIN))
            assert ex["served_by"] == 2 and ex["attempts"] == []  # the peer edge accepted it
            assert ex["claimed_tokens"] > 0
            assert eu_app.service.metrics.get("requests_total", endpoint="generate",
                                              status=200) == 1  # fmt: skip
            r = await eu_client.post("/generate", json={"input_ids": tokens[:64]},
                                     headers={"X-KVC-Forward-To": "2"})  # fmt: skip
            assert r.status == 401  # a relay header is no way around the key

    run(scenario())


def test_baseline_scheme__hashes_in_the_tenants_namespace_too() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN,
                                         scheme="consistent_hash")  # fmt: skip
            tokens = ec.prompt(2048, seed=16)
            for w in range(ec.DEPLOYMENT.n_workers):  # whichever worker the rings pick holds it
                c.register(w, tokens, namespace=KeyNamespace(ec.MODEL, "", "acme"))
            for name, hit in (("acme", True), ("globex", False)):
                await _generate(client, tokens, f"ch-{name}", _bearer(KEYS[name]))
                ex = await _explain(client, f"ch-{name}", _bearer(ADMIN))
                assert ex["scheme"] == "consistent_hash"
                assert (ex["scheme_claimed_tokens"] > 0) is hit, (name, ex)

    run(scenario())


def test_hot_prefix__no_migration_to_a_worker_outside_the_models_pool() -> None:
    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", models={ec.MODEL: {"workers": [2, 3]}})
            now = [0.0]
            app.service.clock_ms = lambda: now[0]  # a fake clock: idleness needs 500 ms
            svc = app.service
            svc.on_local_loads(np.array([0, 1]), np.array([0.0, 0.0]), svc.clock_ms())
            tokens = ec.prompt(8000, seed=17)
            svc.decide("idle-at-0", np.asarray(tokens[:16], np.int32))  # seen idle at 0
            await ec.prime(c.workers[2], tokens)
            c.register(2, tokens)
            for i in range(3):  # what publishes a migration to idle us worker 0 or 1 (routing)
                now[0] = 1000.0 + i
                await _generate(client, tokens, f"hot-{i}")
                assert (await _explain(client, f"hot-{i}"))["served_by"] in (2, 3)
            assert c.sinks["us"].of(app.pipeline.topics.migrations) == []
            assert app.service.metrics.total("migrations_out_of_scope_total") == 1

    run(scenario())


CHANNELS = ("completions", "stream", "generate")


async def _cached_tokens(
    client: Any, key: str, tokens: list[int], channel: str, **extra: Any
) -> int:
    """The reuse count a tenant reads back for ``tokens`` on one channel: ``/v1/completions``
    usage (whole or streamed), or ``/generate``'s ``meta_info`` (whose ``cached_tokens_details``
    must agree)."""
    hdrs = _bearer(key)
    if channel == "generate":
        gen = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 1}, **extra}
        r = await client.post("/generate", json=gen, headers=hdrs)
        assert r.status == 200, await r.text()
        meta = (await r.json())["meta_info"]
        details = meta.get("cached_tokens_details") or {"device": 0, "host": 0}
        assert details["device"] + details["host"] == meta["cached_tokens"]
        return int(meta["cached_tokens"])
    body = {"model": ec.MODEL, "prompt": tokens, "max_tokens": 1, **extra}
    if channel == "stream":
        body.update(stream=True, stream_options={"include_usage": True})
    r = await client.post("/v1/completions", json=body, headers=hdrs)
    assert r.status == 200, await r.text()
    if channel == "stream":
        events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                  if line.startswith("data: {")]  # fmt: skip
        usage = [e["usage"] for e in events if e.get("usage")]
        return int(usage[-1]["prompt_tokens_details"]["cached_tokens"])
    return int((await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_probing_another_groups_prompt_through_cached_tokens__reads_nothing() -> None:
    """Issue 26 item 1, the attack: acme's confidential 1,033-token prompts sit in the cache of
    worker 0, which globex (another sharing group) may also use (the default: no ``workers``).
    On every channel globex replays one, or a guess that shares only its first 4 16-token pages;
    the ``cached_tokens`` it reads must be 0 (the unfixed edge showed 1,024 and 64). Naming
    acme's group as its own ``cache_salt`` gets it nothing either. initech, in acme's group,
    keeps the reuse; so does acme."""

    async def scenario() -> None:
        async with ec.cluster() as c:
            _, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN,
                                         models={ec.MODEL: {"workers": [0]}})  # fmt: skip
            acme, globex, initech = KEYS["acme"], KEYS["globex"], KEYS["initech"]
            for i, ch in enumerate(CHANNELS):
                secret, other = ec.prompt(1033, seed=100 + i), ec.prompt(1033, seed=200 + i)
                for s in (secret, other):
                    assert await _cached_tokens(client, acme, s, "completions") == 0
                assert await _cached_tokens(client, acme, secret, ch) == 1024  # its own reuse
                assert await _cached_tokens(client, globex, secret, ch) == 0, ch
                guess = other[:64] + ec.prompt(969, seed=300 + i)
                assert await _cached_tokens(client, globex, guess, ch) == 0, ch
                assert await _cached_tokens(client, initech, secret, ch) == 1024, ch  # same group
            forged = ec.prompt(1033, seed=400)
            assert await _cached_tokens(client, acme, forged, "completions") == 0
            got = await _cached_tokens(client, globex, forged, "completions", cache_salt="acme")
            assert got == 0  # a client's cache_salt is overwritten by the edge
            w0 = c.workers[0].engine.cache
            assert w0.match(forged, "acme") == (1024, 0) and w0.match(forged) == (0, 0)

    run(scenario())


def test_shared_worker__sidecar_files_each_groups_pages_under_its_own_namespace() -> None:
    """The index side of the salt: acme's and globex's requests both reach worker 0 (salted by
    the edge); the batches the worker publishes go through the wire codec into the sidecar's
    bridge (a sidecar without ``--sharing-group``), its records into the index. Each group's
    next request then finds its own pages there, and only its own."""

    async def scenario() -> None:
        async with ec.cluster() as c:
            app, client = await c.add_edge("us", tenants=TENANTS, admin_token=ADMIN,
                                           models={ec.MODEL: {"workers": [0, 1]}})  # fmt: skip
            w0 = c.workers[0]
            batches: list[bytes] = []
            publish = w0.publisher.publish

            async def recorded(events: Any) -> int:
                batches.append(encode_payload(events, 0, 1.0 + len(batches)))
                return await publish(events)

            w0.publisher.publish = recorded  # type: ignore[method-assign]
            docs = {"acme": ec.prompt(1100, seed=500), "globex": ec.prompt(1100, seed=501)}
            for name, doc in docs.items():  # each group's document, cached on worker 0
                raw, hdrs = ec.signed_relay(
                    "/generate", {"input_ids": doc}, 0, _bearer(KEYS[name])
                )  # served on worker 0
                r = await client.post("/generate", headers=hdrs, data=raw)
                assert r.status == 200, await r.text()
            reg = ec.LEVELS.registration_lengths(0).tolist()
            bridge = RankBridge(0, 0, KeyNamespace(ec.MODEL), reg)
            bridge.start(0)
            for seq, payload in enumerate(batches):
                step = bridge.offer(decode_payload(seq, payload))
                assert isinstance(step, Apply)
                for rec in step.records:
                    if rec["op"] == "STORED":
                        keys = np.asarray(rec["registration_keys"], np.uint64)
                        app.view.apply_all(c.index.register(0, keys))
            groups = ("acme", "globex")
            admin = _bearer(ADMIN)
            for name in groups:
                for other in groups:
                    ask = {"input_ids": docs[other], "tenant": name}
                    r = await client.post("/debug/lookup", headers=admin, json=ask)
                    holders = [h["worker"] for h in (await r.json())["holders"]]
                    assert holders == ([0] if name == other else []), (name, other, holders)

    run(scenario())
