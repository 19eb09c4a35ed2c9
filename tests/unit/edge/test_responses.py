"""``edge.responses``: the worker always streams; the edge assembles whole bodies, clamps the reuse
a worker reports to the prompt length, and ends a stream its client does not read.

Issue 34 item 2: a non-streamed request retires its booking at the worker's FIRST chunk (the
worker below holds the rest of its stream until the test has seen the decider told). Issue 35
item 10: a worker claiming ``cached_tokens`` 10^9 reaches neither the client nor the reuse metrics
above the prompt length; a client that never reads a stream is cut off after
``stream_write_timeout_ms`` with one WARNING line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from edge.app import EdgeApp, assemble, build_app
from edge.config import EdgeConfig
from edge.responses import Assembler, clamp_cached
from tests.unit.edge.test_handlers import DEP, MODEL

LIE = 10**9


def test_clamp_cached__every_count_above_the_prompt_capped() -> None:
    raw = (b'{"meta_info":{"cached_tokens": 1000000000,"cached_tokens_details":{"device":'
           b'999999,"host":3}},"text":"\\"cached_tokens\\": 99"}')  # fmt: skip
    out = json.loads(clamp_cached(raw, 40))
    assert out["meta_info"] == {"cached_tokens": 40,
                                "cached_tokens_details": {"device": 40, "host": 3}}  # fmt: skip
    assert out["text"] == '"cached_tokens": 99'  # inside a string: not a member, untouched
    assert clamp_cached(b'{"cached_tokens":7}', 40) == b'{"cached_tokens":7}'


def test_assembler__completion_from_chunks_as_the_worker_returns_it_whole() -> None:
    a = Assembler("completions")
    head = {"id": "cmpl-1", "created": 5, "model": "m", "object": "text_completion"}
    for text, finish in (("Hel", None), ("lo", None), ("", "length")):
        a.feed(json.dumps({**head, "choices": [{"index": 0, "text": text, "logprobs": None,
                                                "finish_reason": finish}]}).encode())  # fmt: skip
    usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
    a.feed(json.dumps({**head, "choices": [], "usage": usage}).encode())
    choice = {"index": 0, "text": "Hello", "logprobs": None, "finish_reason": "length"}
    assert a.body() == {**head, "choices": [choice], "usage": usage}


def test_assembler__generate_is_its_last_cumulative_object() -> None:
    a = Assembler("generate")
    a.feed(b'{"text": "a", "output_ids": [1], "meta_info": {"cached_tokens": 0}}')
    last = {"text": "ab", "output_ids": [1, 2], "meta_info": {"finish_reason": {"type": "length"}}}
    a.feed(json.dumps(last).encode())
    assert a.body() == last
    with pytest.raises(ValueError, match="no /generate object"):
        Assembler("generate").body()


class Worker:
    """A worker whose stream sends one chunk, then waits for ``release`` (or streams forever)."""

    def __init__(self, flood: bool = False) -> None:
        self.release = asyncio.Event()
        self.flood = flood
        self.streams_ended = asyncio.Event()
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        gen = request.path == "/generate"
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for chunk in self._chunks(gen):
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                if not self.flood:
                    await self.release.wait()
            if self.flood:  # a stream longer than any socket buffer
                pad = {"choices": [{"index": 0, "text": "x" * 60_000}]}
                while True:
                    await resp.write(b"data: " + json.dumps(pad).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionError, asyncio.CancelledError):
            self.streams_ended.set()
            raise
        return resp

    @staticmethod
    def _chunks(gen: bool) -> list[dict[str, Any]]:
        meta = {"cached_tokens": LIE, "id": "w"}
        if gen:
            return [{"text": "a", "output_ids": [7], "meta_info": meta},
                    {"text": "ab", "output_ids": [7, 8], "meta_info": meta}]  # fmt: skip
        head = {"id": "cmpl-w", "object": "text_completion", "created": 1, "model": MODEL}
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                 "prompt_tokens_details": {"cached_tokens": LIE}}  # fmt: skip
        return [{**head, "choices": [{"index": 0, "text": "a", "finish_reason": None}]},
                {**head, "choices": [{"index": 0, "text": "b", "finish_reason": "length"}]},
                {**head, "choices": [], "usage": usage}]  # fmt: skip


async def _rig(worker: Worker, **edge: Any) -> tuple[EdgeApp, TestClient[Any, Any], TestServer]:
    app = web.Application()
    app.router.add_post("/generate", worker.handle)
    app.router.add_post("/v1/completions", worker.handle)
    server = TestServer(app)
    await server.start_server()
    url = str(server.make_url("")).rstrip("/")
    cfg = EdgeConfig.from_mapping({"region": "a", "model": MODEL, "loads_poll_period_ms": 0.0,
                                   **edge}, {"0": url})  # fmt: skip
    e = assemble(cfg, DEP)
    client = TestClient(TestServer(build_app(e)))
    await client.start_server()
    return e, client, server


@pytest.mark.parametrize("path", ["/generate", "/v1/completions"])
def test_whole_response__booking_retires_at_the_first_chunk_and_reuse_clamped(path: str) -> None:
    async def scenario() -> None:
        worker = Worker()
        edge, client, server = await _rig(worker)
        told = asyncio.Event()
        seen: list[int | None] = []
        on_first = edge.service.on_first_token

        def spy(ex: Any, w: int, reused: int | None, vec: Any = None) -> None:
            seen.append(reused)
            told.set()
            on_first(ex, w, reused, vec)

        edge.service.on_first_token = spy  # type: ignore[method-assign,assignment]
        prompt = "hello"  # 5 tokens (byte tokenizer)
        body = ({"text": prompt} if path == "/generate" else
                {"model": MODEL, "prompt": prompt, "max_tokens": 2})  # fmt: skip
        try:
            call = asyncio.create_task(client.post(path, json=body))
            await asyncio.wait_for(told.wait(), 30)  # a hang guard, not a timing threshold
            assert not call.done()  # the decider heard the first token; the body is not out yet
            assert worker.bodies[0]["stream"] is True  # asked the worker for a stream
            worker.release.set()
            r = await asyncio.wait_for(call, 30)
            assert r.status == 200 and r.content_type == "application/json"
            out = await r.json()
        finally:
            await client.close()
            await server.close()
        if path == "/generate":
            assert out == {"text": "ab", "output_ids": [7, 8],
                           "meta_info": {"cached_tokens": 5, "id": "w"}}  # fmt: skip
            assert seen == [5]  # clamped to the prompt's 5 tokens
        else:
            assert out["choices"] == [{"index": 0, "text": "ab", "logprobs": None,
                                       "finish_reason": "length"}]  # fmt: skip
            assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 5}
            assert out["object"] == "text_completion" and out["id"] == "cmpl-w"
        assert edge.service.metrics.total("reused_tokens_total") == 5

    asyncio.run(scenario())


def test_streamed_lie__clamped_in_the_events_the_client_reads() -> None:
    async def scenario() -> None:
        worker = Worker()
        worker.release.set()
        edge, client, server = await _rig(worker)
        try:
            r = await client.post("/generate", json={"text": "hello", "stream": True})
            raw = await r.read()
        finally:
            await client.close()
            await server.close()
        assert str(LIE).encode() not in raw
        events = [json.loads(x[6:]) for x in raw.split(b"\n\n") if x.startswith(b"data: {")]
        assert [e["meta_info"]["cached_tokens"] for e in events] == [5, 5]
        assert edge.service.metrics.total("reused_tokens_total") == 5

    asyncio.run(scenario())


async def _never_read(port: int, body: bytes) -> asyncio.StreamWriter:
    """Send a request and never read a byte of the answer."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.transport.set_write_buffer_limits(0)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
    await writer.drain()
    return writer


def test_a_client_that_never_reads__its_stream_ends_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        worker = Worker(flood=True)
        edge, client, server = await _rig(worker, stream_write_timeout_ms=300.0)
        port = client.server.port
        assert port is not None
        writer = await _never_read(port, json.dumps({"text": "hello", "stream": True}).encode())
        try:
            await asyncio.wait_for(worker.streams_ended.wait(), 60)  # hang guard
            m = edge.service.metrics
            for _ in range(600):  # the handler counts it as it returns
                if m.total("stream_write_timeouts_total"):
                    break
                await asyncio.sleep(0.05)
            assert m.total("stream_write_timeouts_total") == 1
        finally:
            writer.close()
            await client.close()
            await server.close()

    with caplog.at_level(logging.WARNING, logger="edge.responses"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.name == "edge.responses"]
    assert len(lines) == 1 and "read nothing of the stream from worker 0" in lines[0]
