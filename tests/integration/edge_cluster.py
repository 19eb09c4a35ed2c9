"""Test harness: emulated SGLang workers in three regions behind one or more edges, on loopback.

Not a test module (no ``test_`` prefix); the edge tests load it by path. A small deployment with
the paper testbed's WAN matrix (us 2 workers, eu 1, asia 1) keeps process count and ports low;
the emulated workers run with ``time_scale = 0`` (no model sleeps) and the forwarder's WAN delay
scaled by ``WAN_SCALE``. ``register`` puts a worker's prefixes into the edge's in-memory view
through a ``DiscoveryIndex`` (the maintenance side), as the Kafka pipeline would.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from edge.app import EdgeApp, assemble, build_app
from edge.config import EdgeConfig
from edge.feedback import RELAY_HEADER
from edge.relay_auth import SIGNATURE_HEADER, RelayAuth
from kvcompass.deployment import Deployment
from kvcompass.index import DiscoveryIndex
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from wire.producer import MemoryProducer
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

MODEL = "test-model"
RELAY_KEY = "edge-cluster-relay-key-0123456789abcdef"
"""The cluster's relay key (``edge.relay_auth``): relays between its edges are signed with it."""
WAN_SCALE = 0.001
DEPLOYMENT = Deployment.from_dict(
    {
        "name": "edge-test-4x3",
        "block_size_tokens": 16,
        "n_levels": 6,
        "same_region_min_tokens": 128,
        "wan_one_way_ms": [[0.0, 160.0, 126.0], [160.0, 0.0, 149.0], [126.0, 149.0, 0.0]],
        "regions": [
            {"name": "us", "n_workers": 2, "prefill_ms_per_token": 0.085},
            {"name": "eu", "n_workers": 1, "prefill_ms_per_token": 0.085},
            {"name": "asia", "n_workers": 1, "prefill_ms_per_token": 0.085},
        ],
    }
)
LEVELS = Levels.from_deployment(DEPLOYMENT)


def worker_config() -> EmulatedConfig:
    return EmulatedConfig(
        model=MODEL,
        port=0,
        events_endpoint="tcp://127.0.0.1:*",
        replay_endpoint=None,
        costs=EmulatedCosts(time_scale=0.0, decode_ms_per_token=0.0),
    )


@dataclass
class Cluster:
    workers: list[EmulatedWorker]
    index: DiscoveryIndex
    edges: dict[str, tuple[EdgeApp, TestClient[web.Request, web.Application]]] = field(
        default_factory=dict
    )
    sinks: dict[str, MemoryProducer] = field(default_factory=dict)

    @property
    def urls(self) -> dict[int, str]:
        return {w: wk.url for w, wk in enumerate(self.workers)}

    def register(
        self,
        worker: int,
        tokens: list[int],
        upto: int | None = None,
        namespace: KeyNamespace | None = None,
    ) -> None:
        """``worker`` holds ``tokens[:upto]``: index its registration lengths, patch every edge.
        Keys in ``namespace`` (a sidecar's; default: the edges' default model, unsalted)."""
        n = len(tokens) if upto is None else upto
        reg = LEVELS.registration_lengths(int(DEPLOYMENT.worker_region[worker]))
        reg = reg[reg <= n]
        if not reg.size:
            return
        any_edge = next(iter(self.edges.values()))[0]
        hasher = any_edge.service.discovery.hasher
        if namespace is not None:
            hasher = PrefixHasher(namespace)
        keys = hasher.keys_at(np.asarray(tokens, np.int32), reg)
        new = self.index.register(worker, keys)
        for app, _ in self.edges.values():
            app.view.apply_all(new)

    async def add_edge(
        self, region: str, **overrides: Any
    ) -> tuple[EdgeApp, TestClient[web.Request, web.Application]]:
        values: dict[str, Any] = {
            "region": region, "model": MODEL, "wan_delay_scale": WAN_SCALE,
            "loads_poll_period_ms": 0.0, "max_context_tokens": 32_768,
            "relay_key": RELAY_KEY,  # every edge of the cluster: the deployment's one key
        }  # fmt: skip
        only = overrides.pop("only_workers", None)  # a partial [workers] map
        models = overrides.pop("models", None)  # [models.*] and [tenants.*] tables
        tenants = overrides.pop("tenants", None)
        pd = overrides.pop("pd", None)  # a [pd] table (edge.pd)
        values.update(overrides)
        workers = {str(w): u for w, u in self.urls.items() if only is None or w in only}
        peers = values.pop("peers", None)
        cfg = EdgeConfig.from_mapping(values, workers, peers, None, models, tenants, pd)
        sink = MemoryProducer()
        app = assemble(cfg, DEPLOYMENT, sink=sink)
        app.view.apply_all(self.index.full_images())  # what the compacted topic holds
        client = TestClient(TestServer(build_app(app)))
        await client.start_server()
        self.edges[region] = (app, client)
        self.sinks[region] = sink
        return app, client


def signed_relay(
    path: str,
    body: dict[str, Any],
    worker: int,
    headers: dict[str, str] | None = None,
    key: str = RELAY_KEY,
) -> tuple[bytes, dict[str, str]]:
    """(body bytes, headers) of a relay to ``worker`` as a peer edge of the cluster sends it:
    ``X-KVC-Forward-To`` signed with ``key`` (a client's unsigned one is dropped)."""
    raw = json.dumps(body).encode()
    hdrs = {**(headers or {}), RELAY_HEADER: str(worker), "Content-Type": "application/json"}
    hdrs[SIGNATURE_HEADER] = RelayAuth(key).sign(path, raw, hdrs)
    return raw, hdrs


@contextlib.asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    workers = [EmulatedWorker(worker_config()) for _ in range(DEPLOYMENT.n_workers)]
    layout = TableLayout.for_regions([r.n_workers for r in DEPLOYMENT.regions])
    c = Cluster(workers, DiscoveryIndex(layout, n_shards=4, seed=1))
    try:
        for w in workers:
            await w.start()
        yield c
    finally:
        for _, client in c.edges.values():
            await client.close()
        for w in workers:
            await w.close()


def prompt(n: int, seed: int) -> list[int]:
    """``n`` byte tokens (the built-in tokenizer's id range), deterministic per seed."""
    out: list[int] = np.random.default_rng(seed).integers(0, 256, size=n).tolist()
    return out


async def prime(worker: EmulatedWorker, tokens: list[int]) -> None:
    """Make the emulated worker actually cache ``tokens`` (serve them once, directly)."""
    import aiohttp

    async with (
        aiohttp.ClientSession() as s,
        s.post(
            worker.url + "/generate",
            json={"input_ids": tokens, "sampling_params": {"max_new_tokens": 1}},
        ) as r,
    ):
        assert r.status == 200, await r.text()


async def generate(client: Any, tokens: list[int], rid: str, **extra: Any) -> dict[str, Any]:
    """``POST /generate`` through an edge (2 new tokens); the answer, after checking the edge
    answered 200 and echoed the request id."""
    body = {"input_ids": tokens, "sampling_params": {"max_new_tokens": 2}, **extra}
    r = await client.post("/generate", json=body, headers={"X-Request-Id": rid})
    assert r.status == 200, await r.text()
    assert r.headers["X-Request-Id"] == rid
    out: dict[str, Any] = await r.json()
    return out


async def explain(client: Any, rid: str) -> dict[str, Any]:
    """The edge's ``/debug/explain`` entry of request ``rid``."""
    r = await client.get(f"/debug/explain/{rid}")
    assert r.status == 200
    out: dict[str, Any] = await r.json()
    return out


__all__ = ["Cluster", "cluster", "explain", "generate", "prime", "prompt", "web"]
