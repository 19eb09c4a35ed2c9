"""The emulated worker's ``/metrics`` and ``/get_load`` behave as SGLang 0.5.23's by default:
both 404 without their flags (``/metrics`` needs ``--enable-metrics``; SGLang 0.5.23 has no
``/get_load``); with ``--enable-metrics`` every family it serves is one SGLang's own
``metrics_collector.py`` defines (name, type, label names, default buckets: read from the pinned
wheel's source, ``tests/integration/engines.py``), and the values are the requests it served."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

_spec = importlib.util.spec_from_file_location("engines", Path(__file__).with_name("engines.py"))
assert _spec is not None and _spec.loader is not None
eng = importlib.util.module_from_spec(_spec)
sys.modules["engines"] = eng
_spec.loader.exec_module(eng)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
MODEL = "metrics/model"
KINDS = {"gauge": "Gauge", "counter": "Counter", "histogram": "Histogram"}
SERVED = {
    "num_running_reqs", "num_queue_reqs", "token_usage", "num_used_tokens", "kv_used_tokens",
    "kv_evictable_tokens", "kv_available_tokens", "cache_hit_rate", "max_total_num_tokens",
    "page_size", "num_pages", "context_len", "hicache_host_used_tokens",
    "hicache_host_total_tokens", "prompt_tokens_total", "generation_tokens_total",
    "num_requests_total", "cached_tokens_total", "prompt_tokens_histogram",
    "uncached_prompt_tokens_histogram", "generation_tokens_histogram",
    "time_to_first_token_seconds", "e2e_request_latency_seconds",
}  # fmt: skip


@contextlib.asynccontextmanager
async def _worker(**kw: Any) -> AsyncIterator[tuple[EmulatedWorker, aiohttp.ClientSession]]:
    cfg = EmulatedConfig(model=MODEL, port=0, events_endpoint="tcp://127.0.0.1:*",
                         replay_endpoint=None, costs=EmulatedCosts(time_scale=0.0),
                         vram_tokens=4096, dram_tokens=8192, **kw)  # fmt: skip
    async with EmulatedWorker(cfg) as w, aiohttp.ClientSession() as s:
        yield w, s


def _sglang_name(family: str, kind: str) -> str:
    """The name SGLang's source gives: ``prometheus_client``'s parser drops a counter's
    ``_total``, SGLang's ``Counter(name=...)`` keeps it."""
    return family + "_total" if kind == "counter" and not family.endswith("_total") else family


def test_get_load_and_metrics_are_404_by_default_as_on_sglang_0_5_23() -> None:
    async def scenario() -> None:
        async with _worker() as (w, s):
            for path in ("/get_load", "/metrics"):
                async with s.get(w.url + path) as r:
                    assert r.status == 404, path
            async with s.get(w.url + "/v1/loads") as r:  # what the sidecar and the edge read
                assert r.status == 200

    asyncio.run(scenario())


async def _served(prompt: str) -> tuple[dict[str, Any], int, str]:
    """Three requests (non-streamed, streamed, one ended by a stop string), then a scrape."""
    async with _worker(enable_metrics=True) as (w, s):
        gen = {"text": prompt, "sampling_params": {"max_new_tokens": 4}}
        async with s.post(w.url + "/generate", json=gen) as r:
            first = (await r.json())["meta_info"]
        async with s.post(w.url + "/generate", json={**gen, "stream": True}) as r:
            assert r.status == 200
            await r.read()
        stop = {"model": MODEL, "prompt": "x", "max_tokens": 30, "stop": ["e"]}
        async with s.post(w.url + "/v1/completions", json=stop) as r:
            assert r.status == 200
            n_stop = (await r.json())["usage"]["completion_tokens"]
        async with s.get(w.url + "/metrics") as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            return first, n_stop, await r.text()


def test_metrics__sglang_names_labels_buckets_and_the_served_requests() -> None:
    defs = eng.sglang_metrics(eng.engines_dir())
    prompt = "a shared system prompt, long enough for a few pages " * 2
    first, n_stop, text = asyncio.run(_served(prompt))
    families = list(text_string_to_metric_families(text))
    served = set()
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in families:
        name = _sglang_name(fam.name, fam.type)
        assert name in defs, f"{name}: not a metric SGLang 0.5.23 defines"
        d = defs[name]
        assert KINDS[fam.type] == d.kind, name
        served.add(name.removeprefix("sglang:"))
        bounds = set()
        for sample in fam.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            assert tuple(labels) == d.labels, (name, tuple(labels), d.labels)
            assert labels["model_name"] == MODEL and labels["engine_type"] == "unified"
            if "le" in sample.labels and sample.labels["le"] != "+Inf":
                bounds.add(float(sample.labels["le"]))
            values[(sample.name, tuple(sorted(labels.items())))] = sample.value
        if fam.type == "histogram":
            assert d.buckets is not None and tuple(sorted(bounds)) == d.buckets, name
    assert served == SERVED, served ^ SERVED

    def v(name: str, **extra: str) -> float:
        lab = {"model_name": MODEL, "engine_type": "unified", **extra}
        if name in ("num_running_reqs", "num_queue_reqs", "cache_hit_rate",
                    "max_total_num_tokens", "page_size", "kv_evictable_tokens"):  # fmt: skip
            lab |= {"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        return values[("sglang:" + name, tuple(sorted(lab.items())))]

    n = len(prompt)  # one token per byte
    assert first["cached_tokens"] == 0
    assert v("prompt_tokens_total", is_streaming="false") == n + 1  # + the stopped one's "x"
    assert v("prompt_tokens_total", is_streaming="true") == n
    assert v("generation_tokens_total", is_streaming="true") == 4
    assert v("generation_tokens_total", is_streaming="false") == 4 + n_stop
    assert v("num_requests_total", is_streaming="false") == 2  # a stop string is no abort
    assert v("num_requests_total", is_streaming="true") == 1
    cached = n // 16 * 16  # the streamed request reused the first one's whole pages
    assert v("cached_tokens_total", cache_source="device") == cached
    assert v("time_to_first_token_seconds_count", is_streaming="true") == 1
    assert v("time_to_first_token_seconds_count", is_streaming="false") == 2
    assert v("e2e_request_latency_seconds_count", is_streaming="false") == 2
    assert v("num_running_reqs") == 0 and v("num_queue_reqs") == 0
    assert v("cache_hit_rate") == 0.0  # the last prefill ("x") reused nothing
    assert v("max_total_num_tokens") == 4096 and v("page_size") == 16
    assert v("kv_evictable_tokens") >= cached  # idle: the cached pages are evictable
    assert ("sglang:num_aborted_requests_total", ()) not in values
