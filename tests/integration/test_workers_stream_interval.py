"""The emulated worker's ``stream_interval`` (SGLang's ``--stream-interval``): the first token
is streamed alone (TTFT unchanged), then one chunk per ``stream_interval`` tokens, and the
concatenated chunks equal the unstreamed answer, on ``/generate`` and ``/v1/completions``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = pytest.mark.timeout(60)


async def _sse(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    async with s.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            data = line.strip()
            if data.startswith(b"data:") and data[5:].strip() != b"[DONE]":
                out.append(json.loads(data[5:]))
    return out


@pytest.mark.parametrize("interval", [1, 4])
def test_stream_interval__first_token_alone_then_groups(interval: int) -> None:
    cfg = EmulatedConfig(
        model="m", port=0, events_endpoint="tcp://127.0.0.1:*", replay_endpoint=None,
        costs=EmulatedCosts(time_scale=0.0), stream_interval=interval,
    )  # fmt: skip

    async def scenario() -> None:
        async with EmulatedWorker(cfg) as w, aiohttp.ClientSession() as s:
            body = {"input_ids": list(range(40)), "sampling_params": {"max_new_tokens": 10}}
            async with s.post(w.url + "/generate", json=body) as r:
                whole = await r.json()
            chunks = await _sse(s, w.url + "/generate", {**body, "stream": True})
            sizes = [len(c["output_ids"]) for c in chunks]
            assert sizes == ([1, 5, 9, 10] if interval == 4 else list(range(1, 11)))
            assert chunks[-1]["output_ids"] == whole["output_ids"]
            assert chunks[-1]["meta_info"]["completion_tokens"] == 10
            oa = {"model": "m", "prompt": "hello", "max_tokens": 10, "stream": True}
            parts = await _sse(s, w.url + "/v1/completions", oa)
            texts = [p["choices"][0]["text"] for p in parts if p["choices"][0]["text"]]
            assert len(texts) == (4 if interval == 4 else 10)
            async with s.post(w.url + "/v1/completions", json={**oa, "stream": False}) as r:
                assert "".join(texts) == (await r.json())["choices"][0]["text"]

    asyncio.run(scenario())


def test_stream_interval__refused_below_one() -> None:
    from kvcompass.errors import ConfigError

    with pytest.raises(ConfigError, match="stream_interval"):
        EmulatedConfig(stream_interval=0)


def test_loads__prefill_in_progress_counts_its_remaining_tokens() -> None:
    """An engine in the middle of a long chunked prefill with an empty queue is not idle:
    ``/v1/loads`` reports, as SGLang's ``chunked_req`` term does, the tokens of the chunks not
    prefilled yet (whole chunks of ``--chunked-prefill-size``), and 0 once it is done."""
    cfg = EmulatedConfig(
        model="m", port=0, events_endpoint="tcp://127.0.0.1:*", replay_endpoint=None,
        costs=EmulatedCosts(time_scale=1.0, decode_ms_per_token=0.0), chunked_prefill_size=2048,
    )  # fmt: skip

    async def scenario() -> None:
        async with EmulatedWorker(cfg) as w, aiohttp.ClientSession() as s:
            body = {"input_ids": list(range(8000)), "sampling_params": {"max_new_tokens": 1}}
            task = asyncio.create_task(s.post(w.url + "/generate", json=body))
            await asyncio.sleep(0.2)  # 8000 tokens x 0.085 ms = 680 ms of prefill
            async with s.get(w.url + "/v1/loads") as r:
                mid = (await r.json())["loads"][0]
            assert mid["num_waiting_reqs"] == 0
            # 4 chunks: before the last one starts, 8000 minus the whole chunks done
            assert mid["num_waiting_uncached_tokens"] in {8000, 8000 - 2048, 8000 - 2 * 2048}
            (await task).release()
            async with s.get(w.url + "/v1/loads") as r:
                assert (await r.json())["loads"][0]["num_waiting_uncached_tokens"] == 0

    asyncio.run(scenario())


def test_client_leaving_mid_stream__request_no_longer_counted_as_running() -> None:
    cfg = EmulatedConfig(
        model="m", port=0, events_endpoint="tcp://127.0.0.1:*", replay_endpoint=None,
        costs=EmulatedCosts(time_scale=1.0, decode_ms_per_token=10.0),
    )  # fmt: skip

    async def running(s: aiohttp.ClientSession, url: str) -> int:
        async with s.get(url + "/v1/loads") as r:
            return int((await r.json())["loads"][0]["num_running_reqs"])

    async def scenario() -> None:
        async with EmulatedWorker(cfg) as w, aiohttp.ClientSession() as s:
            body = {"input_ids": list(range(64)), "sampling_params": {"max_new_tokens": 500},
                    "stream": True}  # fmt: skip
            async with aiohttp.ClientSession() as leaving:
                r = await leaving.post(w.url + "/generate", json=body)
                await r.content.readline()  # the first chunk arrived; then the client leaves
                assert await running(s, w.url) == 1
                r.close()
            for _ in range(100):  # noticed at the next chunk write (16-token chunks: ~0.2 s)
                if await running(s, w.url) == 0:
                    break
                await asyncio.sleep(0.05)
            assert await running(s, w.url) == 0

    asyncio.run(scenario())


def test_client_leaving_while_queued__request_aborted_before_its_prefill() -> None:
    """SGLang aborts a waiting request whose client left (its tokenizer manager polls every 4 s);
    so does the emulated worker: the queued request never takes the GPU, and the queue empties
    although the prefill ahead of it is still running."""
    cfg = EmulatedConfig(
        model="m", port=0, events_endpoint="tcp://127.0.0.1:*", replay_endpoint=None,
        costs=EmulatedCosts(time_scale=0.05, decode_ms_per_token=0.0),
    )  # fmt: skip

    async def loads(s: aiohttp.ClientSession, url: str) -> dict[str, int]:
        async with s.get(url + "/v1/loads") as r:
            return dict((await r.json())["loads"][0])

    async def scenario() -> None:
        async with EmulatedWorker(cfg) as w, aiohttp.ClientSession() as s:
            # 100K tokens x 0.085 ms = 8.5 s of model time: 0.43 s of wall at scale 0.05
            long = {"input_ids": list(range(100_000)), "sampling_params": {"max_new_tokens": 1}}
            first = asyncio.create_task(s.post(w.url + "/generate", json=long))
            await asyncio.sleep(0.05)
            queued = {"input_ids": list(range(7, 4007)), "sampling_params": {"max_new_tokens": 1},
                      "stream": True}  # fmt: skip
            async with aiohttp.ClientSession() as leaving:
                task = asyncio.create_task(leaving.post(w.url + "/generate", json=queued))
                await asyncio.sleep(0.05)
                assert (await loads(s, w.url))["num_waiting_reqs"] == 1
                task.cancel()  # the client gives up and closes its connection
            for _ in range(100):  # noticed at the next poll: 4 s of model time = 0.2 s here
                if (await loads(s, w.url))["num_waiting_reqs"] == 0:
                    break
                await asyncio.sleep(0.02)
            mid = await loads(s, w.url)
            assert mid["num_waiting_reqs"] == 0 and mid["num_running_reqs"] == 1
            (await first).release()
            after = await loads(s, w.url)
            assert w.engine.loads.requests == 1  # only the long one ever took the GPU
            assert after["total_prefill_uncached_tokens"] == 100_000
            assert after["num_running_reqs"] == 0 and after["num_waiting_reqs"] == 0

    asyncio.run(scenario())
