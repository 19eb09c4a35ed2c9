"""The emulated worker behaves like SGLang 0.5.23 where a client or a router can tell: its load
routes (``token_usage`` as SGLang computes it, ``/get_load`` 404 unless opted in), its limits
and their 400s, no body size limit, OpenAI's full request shapes (text parts, a batch of
prompts, guidellm's body), the abort of a running request whose client left, and a prompt close
with requests in flight."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kvcompass.types import Tier
from tests.client_shapes import guidellm_chat
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = pytest.mark.timeout(90)
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cfg(**kw: Any) -> EmulatedConfig:
    base: dict[str, Any] = {"model": "m", "port": 0, "events_endpoint": "tcp://127.0.0.1:*",
                            "replay_endpoint": None,
                            "costs": EmulatedCosts(time_scale=0.0)}  # fmt: skip
    return EmulatedConfig(**{**base, **kw})


@contextlib.asynccontextmanager
async def _worker(**kw: Any) -> AsyncIterator[tuple[EmulatedWorker, aiohttp.ClientSession]]:
    async with EmulatedWorker(_cfg(**kw)) as w, aiohttp.ClientSession() as s:
        yield w, s


async def _post(s: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with s.post(url, json=body) as r:
        return r.status, await r.json()


async def _sse(s: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    async with s.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            data = line.strip()
            if data.startswith(b"data:") and data[5:].strip() != b"[DONE]":
                out.append(json.loads(data[5:]))
    return out


def test_loads__idle_worker_full_of_cache_reports_no_usage_as_sglang_does() -> None:
    async def scenario() -> None:
        async with _worker(vram_tokens=4096, dram_tokens=0) as (w, s):
            for i in range(8):  # fill VRAM with evictable pages
                ids = [i * 1000 + j for j in range(600)]
                status, _ = await _post(s, w.url + "/generate", {"input_ids": ids,
                                        "sampling_params": {"max_new_tokens": 1}})  # fmt: skip
                assert status == 200
            assert w.engine.cache.usage_tokens(Tier.VRAM) >= 4000
            async with s.get(w.url + "/v1/loads") as r:
                report = await r.json()
            assert isinstance(report["timestamp"], str) and report["num_accelerators"] == 1
            entry = report["loads"][0]
            assert entry["num_used_tokens"] == 0 and entry["token_usage"] == 0.0
            assert entry["max_total_num_tokens"] == 4096 and entry["queues"]["waiting"] == 0
            assert entry["cache_hit_rate"] == 0.0

    asyncio.run(scenario())


def test_loads__running_requests_count_their_pages_once_and_their_private_tokens() -> None:
    slow = EmulatedCosts(decode_ms_per_token=20.0, time_scale=1.0)

    async def scenario() -> None:
        async with _worker(costs=slow, page_size_tokens=16) as (w, s):
            shared = list(range(64))
            bodies = [{"input_ids": shared + [1000 + i] * 8,
                       "sampling_params": {"max_new_tokens": 50}} for i in range(2)]  # fmt: skip
            tasks = [asyncio.create_task(_post(s, w.url + "/generate", b)) for b in bodies]
            while w.engine.loads.running < 2:
                await asyncio.sleep(0.01)
            async with s.get(w.url + "/v1/loads") as r:
                used = (await r.json())["loads"][0]["num_used_tokens"]
            # 4 shared pages once; each request: 8 tail tokens + its decoded ones, in pages
            assert 64 + 2 * 16 <= used <= 64 + 2 * 64
            await asyncio.gather(*tasks)
            async with s.get(w.url + "/v1/loads") as r:
                assert (await r.json())["loads"][0]["num_used_tokens"] == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("serve", [True, False])
def test_get_load__404_like_sglang_0_5_23__or_the_legacy_shape_opted_in(serve: bool) -> None:
    async def scenario() -> None:
        kw = {"enable_get_load": True} if serve else {}  # the default: SGLang 0.5.23's 404
        async with _worker(**kw) as (w, s):
            async with s.get(w.url + "/get_load") as r:
                if not serve:
                    assert r.status == 404
                    return
                body = await r.json()
            assert isinstance(body, list) and len(body) == 1
            assert set(body[0]) == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens",
                                    "num_pending_tokens", "ts_tic"}  # fmt: skip
            assert body[0]["num_tokens"] == 0 and body[0]["num_reqs"] == 0

    asyncio.run(scenario())


def test_limits__context_and_max_tokens_refused_with_sglangs_messages_and_shapes() -> None:
    async def scenario() -> None:
        async with _worker(context_length_tokens=100) as (w, s):
            st, body = await _post(s, w.url + "/generate", {"input_ids": list(range(100))})
            msg = "The input (100 tokens) is longer than the model's context length (100 tokens)."
            assert st == 400 and body == {"error": {"message": msg}}
            st, body = await _post(s, w.url + "/generate", {"input_ids": list(range(90)),
                                   "sampling_params": {"max_new_tokens": 20}})  # fmt: skip
            assert st == 400 and "You requested a total of 110 tokens" in body["error"]["message"]
            st, body = await _post(s, w.url + "/generate", {"input_ids": [1],
                                   "sampling_params": {"max_new_tokens": -1}})  # fmt: skip
            assert body["error"]["message"] == "max_new_tokens must be at least 0, got -1."
            comp = {"model": "m", "prompt": "x" * 90, "max_tokens": 20}
            st, body = await _post(s, w.url + "/v1/completions", comp)
            assert st == 400 and body["object"] == "error" and body["code"] == 400
            assert (
                body["type"] == "BadRequest" and "maximum context length of 100" in body["message"]
            )
            st, body = await _post(s, w.url + "/v1/completions", {**comp, "max_tokens": 0})
            assert (
                st == 400
                and body["type"] == "Bad Request"
                and "must be positive" in body["message"]
            )
            st, body = await _post(s, w.url + "/v1/completions", {**comp, "prompt": ""})
            assert st == 400 and body["message"] == "Prompt cannot be empty"
            chat = {"model": "m", "messages": [], "max_completion_tokens": 2}
            st, body = await _post(s, w.url + "/v1/chat/completions", chat)
            assert st == 400 and body["message"] == "Messages cannot be empty."

    asyncio.run(scenario())


def test_body_limit__none_like_sglang_a_long_prompt_meets_the_context_length_instead() -> None:
    async def scenario() -> None:
        async with _worker(context_length_tokens=400_000) as (w, s):
            ids = [12345] * 300_000  # ~1.8 MB of JSON: aiohttp's default would answer 413
            st, body = await _post(s, w.url + "/generate", {"input_ids": ids,
                                   "sampling_params": {"max_new_tokens": 1}})  # fmt: skip
            assert st == 200 and body["meta_info"]["prompt_tokens"] == 300_000
        async with _worker() as (w, s):
            st, body = await _post(s, w.url + "/generate", {"input_ids": ids})
            assert (
                st == 400 and "longer than the model's context length" in body["error"]["message"]
            )

    asyncio.run(scenario())


def test_chat__text_parts_read_as_the_string_and_other_parts_refused() -> None:
    async def scenario() -> None:
        async with _worker() as (w, s):
            url = w.url + "/v1/chat/completions"
            plain = {"model": "m", "max_tokens": 4,
                     "messages": [{"role": "user", "content": "hello world"}]}  # fmt: skip
            two = [{"type": "text", "text": "hello"}, {"type": "text", "text": "world"}]
            parts = {**plain, "messages": [{"role": "user", "content": two}]}
            (sa, a), (sb, b) = await _post(s, url, plain), await _post(s, url, parts)
            assert sa == sb == 200
            assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
            assert b["usage"]["prompt_tokens_details"]["cached_tokens"] > 0  # same prefix
            image = {**plain, "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}  # fmt: skip
            st, err = await _post(s, url, image)
            assert st == 400 and "'image_url'" in err["message"]
            chunks = await _sse(s, url, guidellm_chat("m", "benchmark me " * 10, 5))
            assert chunks[-1]["usage"]["completion_tokens"] == 5
            assert "".join(c["choices"][0]["delta"].get("content", "")
                           for c in chunks if c["choices"])  # fmt: skip

    asyncio.run(scenario())


def test_completions__a_list_of_prompts_is_a_batch_as_sglang_serves_it() -> None:
    async def scenario() -> None:
        async with _worker() as (w, s):
            url = w.url + "/v1/completions"
            one = [await _post(s, url, {"model": "m", "prompt": p, "max_tokens": 5})
                   for p in ("alpha", "beta", "gamma")]  # fmt: skip
            st, batch = await _post(s, url, {"model": "m", "prompt": ["alpha", "beta", "gamma"],
                                             "max_tokens": 5})  # fmt: skip
            assert st == 200 and [c["index"] for c in batch["choices"]] == [0, 1, 2]
            assert [c["text"] for c in batch["choices"]] == [
                o["choices"][0]["text"] for _, o in one
            ]
            assert batch["usage"]["prompt_tokens"] == sum(
                o["usage"]["prompt_tokens"] for _, o in one
            )
            assert batch["usage"]["completion_tokens"] == 15
            ids = [[104, 105], [106, 107, 108]]
            usage = {"include_usage": True}
            chunks = await _sse(s, url, {"model": "m", "prompt": ids, "max_tokens": 3,
                                         "stream": True, "stream_options": usage})  # fmt: skip
            texts: dict[int, str] = {}
            for c in chunks[:-1]:
                for ch in c["choices"]:
                    texts[ch["index"]] = texts.get(ch["index"], "") + ch["text"]
            assert sorted(texts) == [0, 1] and chunks[-1]["usage"]["prompt_tokens"] == 5

    asyncio.run(scenario())


def test_abort__a_running_request_whose_client_left_stops_decoding() -> None:
    # 100,000 tokens at 10 ms x 0.01 = 10 s of decode; the client leaves after its first second
    costs = EmulatedCosts(decode_ms_per_token=10.0, time_scale=0.01)

    async def scenario() -> None:
        async with _worker(costs=costs) as (w, s):
            body = {"input_ids": list(range(32)), "sampling_params": {"max_new_tokens": 100_000}}
            timeout = aiohttp.ClientTimeout(total=0.5)
            with pytest.raises(asyncio.TimeoutError):
                await s.post(w.url + "/generate", json=body, timeout=timeout)
            assert w.engine.loads.running == 1  # still decoding when the client left
            for _ in range(200):
                if w.engine.loads.running == 0:
                    break
                await asyncio.sleep(0.05)
            assert w.engine.loads.running == 0
            assert w.engine.kv_used_tokens() == 0

    asyncio.run(scenario())


def test_close__in_flight_requests_are_cancelled_not_awaited_to_their_end() -> None:
    costs = EmulatedCosts(decode_ms_per_token=10.0, time_scale=0.1)  # 100,000 tokens: 100 s

    async def scenario() -> tuple[int, BaseException | None]:
        w = EmulatedWorker(_cfg(costs=costs, shutdown_timeout_s=0.2))
        await w.start()
        async with aiohttp.ClientSession() as s:
            body = {"input_ids": list(range(32)), "sampling_params": {"max_new_tokens": 100_000}}
            req = asyncio.create_task(_post(s, w.url + "/generate", body))
            while w.engine.loads.running == 0:
                await asyncio.sleep(0.01)
            await w.close()
            done, _ = await asyncio.wait({req}, timeout=30)
            return w.engine.loads.running, (req.exception() if done else None)

    running, err = asyncio.run(scenario())
    assert running == 0
    assert isinstance(err, aiohttp.ClientError)  # the connection closed: no 100 s wait


def test_abort__a_streamed_batch_whose_client_left_frees_every_prompt() -> None:
    costs = EmulatedCosts(decode_ms_per_token=10.0, time_scale=0.01)

    async def scenario() -> None:
        async with _worker(costs=costs, stream_interval=16) as (w, _s):
            body = {"model": "m", "prompt": ["first prompt", "second prompt"],
                    "max_tokens": 100_000, "stream": True}  # fmt: skip
            async with aiohttp.ClientSession() as leaving:
                r = await leaving.post(w.url + "/v1/completions", json=body)
                await r.content.readline()  # streaming; then the client leaves
                assert w.engine.loads.running == 2
                r.close()
            for _ in range(200):
                if w.engine.loads.running == 0:
                    break
                await asyncio.sleep(0.05)
            assert w.engine.loads.running == 0 and w.engine.kv_used_tokens() == 0

    asyncio.run(scenario())


def test_sigterm__the_worker_process_exits_with_a_request_still_decoding(tmp_path: Path) -> None:
    """``kvcompass worker emulate`` with a request that would decode for 100 s: SIGTERM ends the
    process (exit 0) and the client's connection, long before the request's end."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "cli", "worker", "emulate", "--port", str(port), "--model", "m",
           "--kv-events-config", '{"publisher":"zmq","endpoint":"tcp://127.0.0.1:*"}',
           "--decode-ms-per-token", "10", "--time-scale", "0.1",
           "--shutdown-timeout-s", "0.5"]  # fmt: skip
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    async def scenario() -> tuple[int, BaseException | None]:
        url = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as s:
            for _ in range(600):
                with contextlib.suppress(aiohttp.ClientError):
                    async with s.get(url + "/health") as r:
                        if r.status == 200:
                            break
                await asyncio.sleep(0.1)
            body = {"input_ids": list(range(32)), "sampling_params": {"max_new_tokens": 100_000}}
            req = asyncio.create_task(_post(s, url + "/generate", body))
            for _ in range(100):
                async with s.get(url + "/v1/loads") as r:
                    if (await r.json())["loads"][0]["num_running_reqs"] == 1:
                        break
                await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(proc.wait, 60)
            done, _ = await asyncio.wait({req}, timeout=30)
            return code, (req.exception() if done else None)

    try:
        code, err = asyncio.run(scenario())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 0, (tmp_path / "worker.log").read_text(errors="replace")[-2000:]
    assert isinstance(err, aiohttp.ClientError)
