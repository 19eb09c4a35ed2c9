"""The edge routes a disaggregated region (issue 29 item 1): the pair SGLang's PD router sends.

Two emulated SGLang prefill workers (the region's indexed workers) and two decode workers behind
one real edge with a ``[pd]`` table: the edge picks the prefill worker with the decider, sends
the same body with ``bootstrap_host``/``bootstrap_port``/``bootstrap_room`` to it and to the
decode worker with the fewest open requests, and answers with the decode worker's response. The
decode worker reports the prefill's cached tokens (as SGLang's does), so the decider's feedback
works unchanged: a follow-up turn goes back to the prefill worker that holds its prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edge.app import assemble
from edge.config import EdgeConfig
from edge.pd import PDConfig
from kvcompass.errors import ConfigError
from kvcompass.index import DiscoveryIndex
from kvcompass.layout import TableLayout
from tests.integration import edge_cluster as ec
from workers.emulated.worker import EmulatedWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def _worker(mode: str) -> EmulatedWorker:
    cfg = replace(ec.worker_config(), disaggregation_mode=mode, disaggregation_bootstrap_port=0)
    return EmulatedWorker(cfg)


@contextlib.asynccontextmanager
async def _pd_region() -> AsyncIterator[tuple[ec.Cluster, list[EmulatedWorker]]]:
    prefill = [_worker("prefill") for _ in range(2)]
    decode = [_worker("decode") for _ in range(2)]
    layout = TableLayout.for_regions([r.n_workers for r in ec.DEPLOYMENT.regions])
    c = ec.Cluster(prefill, DiscoveryIndex(layout, n_shards=4, seed=1))
    try:
        for w in (*prefill, *decode):
            await w.start()
        yield c, decode
    finally:
        for _, client in c.edges.values():
            await client.close()
        for w in (*prefill, *decode):
            await w.close()


def _pd_table(c: ec.Cluster, decode: list[EmulatedWorker]) -> dict[str, Any]:
    ports = {str(w): wk.info.disaggregation_bootstrap_port for w, wk in enumerate(c.workers)}
    return {"decode": [d.url for d in decode], "bootstrap_ports": ports}


def test_pd_region__pairs_prefill_and_decode__feedback_and_decode_balance() -> None:
    async def scenario() -> None:
        async with _pd_region() as (c, decode):
            app, client = await c.add_edge("us", only_workers=[0, 1], pd=_pd_table(c, decode))
            svc = app.service
            svc.on_local_loads(np.array([0, 1]), np.array([0.0, 0.0]), svc.clock_ms())
            pd = app.forwarder.pd
            assert pd is not None
            for i in range(6):
                a = ec.prompt(1200, seed=300 + i)
                out = await ec.generate(client, a, f"a-{i}")
                assert out["meta_info"]["completion_tokens"] == 2  # the decode's answer
                first = (await ec.explain(client, f"a-{i}"))["served_by"]
                assert first in (0, 1)
                # the prefill worker the decider chose holds the prompt; the decode holds none
                assert sum(c.workers[first].engine.cache.match(a)) >= 1024
                assert all(sum(d.engine.cache.match(a)) == 0 for d in decode)
                out = await ec.generate(client, [*a, 5, 6, 7], f"b-{i}")
                ex = await ec.explain(client, f"b-{i}")
                assert ex["served_by"] == first  # feedback confirmed the prefix at once
                cached = out["meta_info"]["cached_tokens"]
                assert cached >= 1024 and ex["reused_tokens"] == cached  # the prefill's count
            # sequential requests: the least-open decode worker, ties in turn: both served
            assert [d.engine.loads.requests for d in decode] == [6, 6]
            assert pd.open == [0, 0] and svc.metrics.total("pd_prefill_failures_total") == 0
            assert svc.decider.open_forwards() == 0

    asyncio.run(scenario())


def test_pd_region__streamed_and_openai_shapes_go_through_the_pair() -> None:
    async def scenario() -> None:
        async with _pd_region() as (c, decode):
            app, client = await c.add_edge("us", only_workers=[0, 1], pd=_pd_table(c, decode))
            body = {"input_ids": ec.prompt(300, seed=9), "stream": True,
                    "sampling_params": {"max_new_tokens": 3}}  # fmt: skip
            r = await client.post("/generate", json=body)
            assert r.status == 200
            chunks = [ln for ln in (await r.text()).splitlines() if ln.startswith("data:")]
            assert chunks[-1] == "data: [DONE]" and len(chunks) >= 2
            r = await client.post("/v1/completions", json={"model": ec.MODEL, "prompt": "x" * 400,
                                                           "max_tokens": 2})  # fmt: skip
            assert r.status == 200, await r.text()
            assert (await r.json())["usage"]["completion_tokens"] == 2
            assert sum(d.engine.loads.requests for d in decode) == 2
            assert app.forwarder.pd is not None and app.forwarder.pd.open == [0, 0]

    asyncio.run(scenario())


def test_pd_config__clear_errors() -> None:
    with pytest.raises(ConfigError, match="decode"):
        PDConfig.from_mapping({"decode": []})
    with pytest.raises(ConfigError, match="unknown keys"):
        PDConfig.from_mapping({"decode": ["http://h:1"], "prefill": []})
    with pytest.raises(ConfigError, match="ports"):
        PDConfig.from_mapping({"decode": ["http://h:1"], "bootstrap_ports": {"0": 70000}})
    cfg = EdgeConfig.from_mapping(
        {"region": "us", "model": ec.MODEL}, {"0": "http://127.0.0.1:1", "2": "http://h:2"},
        pd={"decode": ["http://127.0.0.1:3"], "bootstrap_ports": {"2": 8998}},
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"workers \[2\] are not this region's"):
        assemble(cfg, ec.DEPLOYMENT)


def test_readme_pd_config__parses_as_written() -> None:
    """edge/README.md's ``[pd]`` example is a valid config meaning what the README says."""
    text = (Path(__file__).resolve().parents[2] / "edge" / "README.md").read_text()
    m = re.search(r"<!-- config:pd -->\s*```toml\n(.*?)```", text, re.S)
    assert m is not None
    cfg = EdgeConfig.from_toml_text(m.group(1))
    assert cfg.pd == PDConfig(("http://10.0.0.20:30000", "http://10.0.0.21:30000"), ((1, 9000),))
    assert cfg.pd.bootstrap_port == 8998 and dict(cfg.workers) == {
        0: "http://10.0.0.10:30000", 1: "http://10.0.0.11:30000"}  # fmt: skip
