"""Tiny-llama emulated workers (real KV tensors, torch on the CPU): a request served from a reused
prefix, and one served from pages copied from another worker over HTTP (intra-region migration),
give the logits of a from-scratch prefill and run only the uncached tokens through the model; the
copy registers the replica in the host tier; a malformed copy is a 400."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import msgspec
import numpy as np
import pytest
import torch

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


def _forwarded(w: EmulatedWorker) -> int:
    assert w.engine.model is not None
    return w.engine.model.forwarded_tokens


async def _scenario() -> dict[str, Any]:
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, 256, 48).tolist()
    prompt = prefix + rng.integers(0, 256, 13).tolist()
    scratch = TinyLlama(TINY).forward(prompt)[0][-1]
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
            copy_forwarded = _forwarded(b)
            async with http.post(b.url + "/generate", json={"input_ids": prompt, "stream": False,
                                 "sampling_params": {"max_new_tokens": 4}}) as r:  # fmt: skip
                gen = await r.json()
            async with http.post(a.url + "/kv/export", json={"input_ids": prefix}) as r:
                blob = msgspec.msgpack.decode(await r.read())
            blob["kv"] = blob["kv"][:-4]
            async with http.post(b.url + "/kv/import", data=msgspec.msgpack.encode(blob)) as r:
                bad = (r.status, (await r.json())["error"]["message"])
        stored = [
            e
            for _, payload in b.publisher._buffer
            for e in decode_payload(0, payload).events
            if isinstance(e, Stored)
        ]
        forwarded = {"a": _forwarded(a), "b_copy": copy_forwarded, "b": _forwarded(b)}
        b.engine.cache.clear()
        await b.engine.import_kv(*a.engine.export_kv(prefix))  # type: ignore[arg-type]
        copied_adm, copied_logits = await _logits(b, prompt)
    return {"scratch": scratch, "reused": reused, "reused_logits": reused_logits,
            "copied": copied, "ex": ex, "gen": gen, "forwarded": forwarded, "bad": bad,
            "stored": stored, "copied_adm": copied_adm, "copied_logits": copied_logits}  # fmt: skip


def test_reused_and_copied_prefixes_give_scratch_logits__tiny_llama() -> None:
    r = asyncio.run(_scenario())
    assert r["reused"].device_hit_tokens == 48
    torch.testing.assert_close(r["reused_logits"], r["scratch"], rtol=1e-4, atol=1e-4)
    # a: 48 (prefix) + 13 (the prompt's uncached tail); b: nothing for the copy, then the
    # prompt's 13 uncached tokens and 4 decode steps
    assert r["forwarded"] == {"a": 48 + 13, "b_copy": 0, "b": 13 + 4}
    assert r["copied"] == 48 and r["ex"].stats.copied == 1
    assert r["stored"][0].medium == "CPU_PINNED" and len(r["stored"][0].block_hashes) == 6
    assert r["gen"]["meta_info"]["cached_tokens_details"] == {"device": 0, "host": 48}
    assert r["copied_adm"].host_hit_tokens == 48
    torch.testing.assert_close(r["copied_logits"], r["scratch"], rtol=1e-4, atol=1e-4)
    assert r["bad"][0] == 400 and "bytes for shape" in r["bad"][1]
