"""The demo's load generator and report against real edges and emulated workers (in process).

A small Mixed workload is replayed through three edges; every request must come back with a
TTFT no later than its end-to-end time, the serving worker named, and cached tokens that the
report turns into hit rate and reuse; a prompt repeated once the index knows its holder hits.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from e2e import report
from e2e.loadgen import LoadGenerator, Results
from sim.experiment import make_workload
from tests.integration import edge_cluster as ec

pytestmark = pytest.mark.timeout(120)


def test_loadgen_through_edges__measures_and_summarises(tmp_path: Path) -> None:
    wl = make_workload("mixed", 16, 200.0, ec.DEPLOYMENT, seed=3)
    again = wl.slice(0, 1)  # request 0 once more, after the index learned where it went

    async def scenario() -> tuple[Results, Results]:
        async with ec.cluster() as c:
            urls = []
            for region in ("us", "eu", "asia"):
                _, client = await c.add_edge(region, max_context_tokens=131_072)
                urls.append(str(client.make_url("")).rstrip("/"))
            gen = LoadGenerator(wl, urls, time_scale=0.05, max_output_tokens=4, run_id="t")
            seen: list[int] = []
            res = await gen.run(seen.append)
            assert seen[-1] == len(wl)
            c.register(int(res.worker[0]), wl.tokens_of(0).tolist())  # as the pipeline would
            rep = LoadGenerator(again, urls, time_scale=0.05, max_output_tokens=4, run_id="u")
            return res, await rep.run()

    res, rep = asyncio.run(scenario())
    assert rep.ok.all() and rep.worker[0] == res.worker[0]
    assert rep.cached_tokens[0] >= wl.prompt_len[0] - ec.DEPLOYMENT.block_size_tokens
    assert res.ok.all(), res.errors
    assert (res.ttft_ms <= res.e2e_ms).all() and (res.ttft_ms > 0).all()
    assert set(res.worker.tolist()) <= set(range(ec.DEPLOYMENT.n_workers))
    assert (res.output_tokens == np.minimum(np.maximum(wl.output_len, 1), 4)).all()
    wr = np.asarray(ec.DEPLOYMENT.worker_region, np.int64)
    s = report.summarise(res, wr)
    assert s["completed"] == len(wl) and s["failed"] == 0
    assert 0 <= s["request_hit_rate"] <= 1 and 0 <= s["hit_rate"] < 1
    hit = report.summarise(rep, wr)
    assert hit["request_hit_rate"] == 1.0 and hit["hit_rate"] > 0.9
    assert hit["cross_region_share"] == float(wr[rep.worker[0]] != rep.origin[0])
    assert s["ttft_p50_ms"] <= s["ttft_p99_ms"] <= s["e2e_p99_ms"]
    rows = [{"workload": "mixed", "origins": "workers", "rate": 200.0, "scheme": "kvcompass", **s}]
    report.write_json(tmp_path / "r.json", {"seed": 3}, rows)
    assert json.loads((tmp_path / "r.json").read_text())["runs"][0]["completed"] == len(wl)
    (png,) = report.plot(rows, tmp_path)
    assert png.stat().st_size > 1000
