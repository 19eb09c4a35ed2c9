"""Tiny-llama emulated workers (real KV tensors, numpy): a request served from a reused prefix,
and one served from pages copied from another worker over HTTP (intra-region migration), give
the logits of a from-scratch prefill; the copy registers the replica in the host tier."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import numpy as np
import pytest

from workers.emulated.costs import EmulatedCosts
from workers.emulated.tiny_llama import TinyLlama, TinyLlamaConfig
from workers.emulated.worker import EmulatedConfig, EmulatedWorker
from workers.migration import MigrationExecutor
from workers.protocol import Stored, decode_payload

pytestmark = pytest.mark.integration
TINY = TinyLlamaConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64, seed=5)


def _cfg() -> EmulatedConfig:
    return EmulatedConfig(model="tiny-llama", port=0, page_size_tokens=8, vram_tokens=256,
                          dram_tokens=256, events_endpoint="tcp://127.0.0.1:*",
                          replay_endpoint="tcp://127.0.0.1:*", tiny_llama=TINY,
                          costs=EmulatedCosts(time_scale=0.0))  # fmt: skip


async def _logits(w: EmulatedWorker, tokens: list[int]) -> tuple[Any, Any]:
    adm = await w.engine.prefill(tokens)
    w.engine.done(adm)
    return adm, adm.logits


async def _scenario() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, 256, 48).tolist()
    prompt = prefix + rng.integers(0, 256, 13).tolist()
    scratch = TinyLlama(TINY).forward(np.array(prompt))[0][-1]
    async with EmulatedWorker(_cfg()) as a, EmulatedWorker(_cfg()) as b:
        await _logits(a, prefix)
        reused, reused_logits = await _logits(a, prompt)
        async with aiohttp.ClientSession() as http:
            ex = MigrationExecutor(1, b.url, peers={0: a.url})
            rec = {"request_id": "c1", "target_worker_id": 1, "source_worker_id": 0,
                   "mode": "INTRA_REGION_COPY",
                   "prefix_tokens": np.array(prefix, "<i4").tobytes()}  # fmt: skip
            assert ex.accept(rec)
            copied = await ex.execute(http, rec)
            async with http.post(b.url + "/generate", json={"input_ids": prompt, "stream": False,
                                 "sampling_params": {"max_new_tokens": 4}}) as r:  # fmt: skip
                gen = await r.json()
        stored = [
            e
            for _, payload in b.publisher._buffer
            for e in decode_payload(0, payload).events
            if isinstance(e, Stored)
        ]
        b.engine.cache.clear()
        await b.engine.import_kv(*a.engine.export_kv(prefix))  # type: ignore[arg-type]
        copied_adm, copied_logits = await _logits(b, prompt)
    return {"scratch": scratch, "reused": reused, "reused_logits": reused_logits,
            "copied": copied, "ex": ex, "gen": gen,
            "stored": stored, "copied_adm": copied_adm, "copied_logits": copied_logits}  # fmt: skip


def test_reused_and_copied_prefixes_give_scratch_logits__tiny_llama() -> None:
    r = asyncio.run(_scenario())
    assert r["reused"].device_hit_tokens == 48
    np.testing.assert_allclose(r["reused_logits"], r["scratch"], rtol=1e-4, atol=1e-4)
    assert r["copied"] == 48 and r["ex"].stats.copied == 1
    assert r["stored"][0].medium == "CPU_PINNED" and len(r["stored"][0].block_hashes) == 6
    assert r["gen"]["meta_info"]["cached_tokens_details"] == {"device": 0, "host": 48}
    assert r["copied_adm"].host_hit_tokens == 48
    np.testing.assert_allclose(r["copied_logits"], r["scratch"], rtol=1e-4, atol=1e-4)
