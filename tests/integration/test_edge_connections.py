"""A hostile client cannot hold the edge: slowloris, bodies never sent or short, too many sockets.

The real edge lifecycle (``edge.main.run_edge``, no Kafka) with short timeouts; raw sockets play
the clients. Each bad connection must be closed by the edge (EOF, or a 408 then EOF) while
``GET /health`` keeps answering; a client that goes away mid-body is a ``client_disconnect``,
not an internal error. The deadlines below only bound how long a failing test waits.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from edge.app import EdgeApp
from edge.config import EdgeConfig
from edge.main import run_edge
from kvcompass.deployment import builtin_deployment

pytestmark = pytest.mark.integration
DEP = builtin_deployment("paper-testbed-14x3")
TIMEOUT_MS = 1000.0
GIVE_UP_S = 30.0
Scenario = Callable[[EdgeApp], Awaitable[None]]


def _run(scenario: Scenario, **cfg: Any) -> None:
    config = EdgeConfig(region="us", port=0, loads_poll_period_ms=0.0,
                        keepalive_timeout_ms=TIMEOUT_MS, body_timeout_ms=TIMEOUT_MS,
                        **cfg)  # fmt: skip

    async def main() -> None:
        stop = asyncio.Event()
        started: asyncio.Future[EdgeApp] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(run_edge(config, DEP, stop=stop, started=started))
        edge = await asyncio.wait_for(started, 120)
        try:
            await scenario(edge)
        finally:
            stop.set()
            await asyncio.wait_for(task, 60)

    asyncio.run(main())


async def _health(port: int) -> int:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /health HTTP/1.1\r\nHost: e\r\nConnection: close\r\n\r\n")
    data = await asyncio.wait_for(r.read(), GIVE_UP_S)
    w.close()
    return int(data.split(b" ", 2)[1])


async def _until_closed(r: asyncio.StreamReader) -> tuple[bytes, float]:
    """Everything the edge sends until it closes, and when it closed (monotonic s)."""
    got = b""
    try:
        async with asyncio.timeout(GIVE_UP_S):
            while chunk := await r.read(65536):
                got += chunk
    except ConnectionResetError:
        pass
    return got, time.monotonic()


def test_slowloris_connections_are_closed_while_health_answers__partial_headers() -> None:
    async def scenario(edge: EdgeApp) -> None:
        port = edge.bound_port
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(40)]
        t0 = time.monotonic()
        for _, w in conns:
            w.write(b"POST /generate HTTP/1.1\r\nHost: e\r\n")

        async def trickle() -> None:  # one more header line every 0.2 s, never the blank line
            for i in range(int(GIVE_UP_S / 0.2)):
                await asyncio.sleep(0.2)
                for _, w in conns:
                    if not w.is_closing():
                        w.write(b"X-Slow-%d: y\r\n" % i)

        dripping = asyncio.create_task(trickle())
        assert [await _health(port) for _ in range(5)] == [200] * 5  # served meanwhile
        closed = await asyncio.gather(*(_until_closed(r) for r, _ in conns))
        dripping.cancel()
        assert all(data == b"" for data, _ in closed)  # dropped before any request was read
        print(f"slowloris: 40 closed after {max(t for _, t in closed) - t0:.2f} s (timeout 1 s)")
        assert await _health(port) == 200

    _run(scenario)


@pytest.mark.parametrize("sent", [b"", b'{"text": "hel'], ids=["never-sent", "short"])
def test_body_not_arriving_gets_408_and_the_connection_closed__content_length(sent: bytes) -> None:
    async def scenario(edge: EdgeApp) -> None:
        port = edge.bound_port
        conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
        t0 = time.monotonic()
        for _, w in conns:
            w.write(b"POST /generate HTTP/1.1\r\nHost: e\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000\r\n\r\n" + sent)  # fmt: skip
        assert [await _health(port) for _ in range(5)] == [200] * 5
        closed = await asyncio.gather(*(_until_closed(r) for r, _ in conns))
        assert all(data.startswith(b"HTTP/1.1 408 ") for data, _ in closed), closed[0][0][:200]
        assert all(b"body: expected all of it within 1000 ms" in data for data, _ in closed)
        print(f"{sent!r}: 20 closed after {max(t for _, t in closed) - t0:.2f} s (timeout 1 s)")
        m = edge.service.metrics
        assert m.get("errors_total", type="internal") == 0
        assert await _health(port) == 200

    _run(scenario)


def test_client_leaving_mid_body_is_a_client_disconnect__not_an_internal_error() -> None:
    async def scenario(edge: EdgeApp) -> None:
        port = edge.bound_port
        for _ in range(5):
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"POST /generate HTTP/1.1\r\nHost: e\r\nContent-Length: 1000\r\n\r\n{")
            await w.drain()
            await asyncio.sleep(0.05)
            w.transport.abort()  # RST: the edge's body read fails
        m = edge.service.metrics
        for _ in range(int(GIVE_UP_S / 0.05)):
            if m.get("client_disconnect_total") == 5:
                break
            await asyncio.sleep(0.05)
        assert m.get("client_disconnect_total") == 5
        assert m.get("errors_total", type="internal") == 0
        assert await _health(port) == 200

    _run(scenario)


def test_connections_beyond_the_cap_get_503__max_connections() -> None:
    async def scenario(edge: EdgeApp) -> None:
        port = edge.bound_port
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(8)]
        # the edge accepts in order: these 8 are open connections before the 9th is accepted
        r, _ = await asyncio.open_connection("127.0.0.1", port)
        data, _ = await _until_closed(r)
        assert data.startswith(b"HTTP/1.1 503 ") and b"too many open connections" in data
        assert edge.service.metrics.get("connections_refused_total") >= 1
        for _, hw in held:
            hw.close()
        for _ in range(int(GIVE_UP_S / 0.05)):  # served again once they are gone
            try:
                if await _health(port) == 200:
                    return
            except (ValueError, IndexError, ConnectionError):
                pass
            await asyncio.sleep(0.05)
        raise AssertionError("the edge did not serve again after the held connections closed")

    _run(scenario, max_connections=8)


def test_client_leaving_mid_stream_is_a_client_disconnect__emulated_worker() -> None:
    from workers.emulated.costs import EmulatedCosts
    from workers.emulated.worker import EmulatedConfig, EmulatedWorker

    async def main() -> None:
        wcfg = EmulatedConfig(model="meta-llama/Llama-3.1-8B-Instruct", port=0,
                              page_size_tokens=16, events_endpoint="tcp://127.0.0.1:*",
                              replay_endpoint=None,
                              costs=EmulatedCosts(decode_ms_per_token=20.0))  # fmt: skip
        async with EmulatedWorker(wcfg) as w:
            config = EdgeConfig(region="us", port=0, loads_poll_period_ms=0.0,
                                workers=((0, w.url),), keepalive_timeout_ms=TIMEOUT_MS,
                                body_timeout_ms=TIMEOUT_MS)  # fmt: skip
            stop = asyncio.Event()
            started: asyncio.Future[EdgeApp] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(run_edge(config, DEP, stop=stop, started=started))
            edge = await asyncio.wait_for(started, 120)
            try:
                body = b'{"text": "hello there", "stream": true, "sampling_params": ' \
                       b'{"max_new_tokens": 500, "ignore_eos": true}}'  # fmt: skip
                r, wr = await asyncio.open_connection("127.0.0.1", edge.bound_port)
                wr.write(b"POST /generate HTTP/1.1\r\nHost: e\r\nContent-Type: application/json"
                         b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
                assert (await asyncio.wait_for(r.readline(), GIVE_UP_S)).startswith(b"HTTP/1.1 200")
                await asyncio.wait_for(r.readuntil(b"data: "), GIVE_UP_S)  # streaming has begun
                wr.transport.abort()
                m = edge.service.metrics
                for _ in range(int(GIVE_UP_S / 0.05)):
                    if m.get("client_disconnect_total") >= 1:
                        break
                    await asyncio.sleep(0.05)
                assert m.get("client_disconnect_total") == 1
                assert m.get("errors_total", type="internal") == 0
                assert await _health(edge.bound_port) == 200
            finally:
                stop.set()
                await asyncio.wait_for(task, 60)

    asyncio.run(main())


def test_client_leaving_before_the_first_byte__upstream_closed_and_the_worker_aborts() -> None:
    """A client that gives up while its request waits in the worker's queue: the edge closes its
    upstream request (it polls its client every 0.5 s), so the emulated worker, like SGLang,
    aborts the queued request instead of prefilling it for nobody."""
    from workers.emulated.costs import EmulatedCosts
    from workers.emulated.worker import EmulatedConfig, EmulatedWorker

    async def main() -> None:
        # 100K tokens at 0.085 ms = 8.5 s of model time, 1.7 s of wall at scale 0.2
        wcfg = EmulatedConfig(model="meta-llama/Llama-3.1-8B-Instruct", port=0,
                              page_size_tokens=16, events_endpoint="tcp://127.0.0.1:*",
                              replay_endpoint=None,
                              costs=EmulatedCosts(time_scale=0.2,
                                                  decode_ms_per_token=0.0))  # fmt: skip
        async with EmulatedWorker(wcfg) as w:
            config = EdgeConfig(region="us", port=0, loads_poll_period_ms=0.0,
                                workers=((0, w.url),), keepalive_timeout_ms=60_000.0,
                                body_timeout_ms=TIMEOUT_MS,
                                max_context_tokens=200_000)  # fmt: skip
            stop = asyncio.Event()
            started: asyncio.Future[EdgeApp] = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(run_edge(config, DEP, stop=stop, started=started))
            edge = await asyncio.wait_for(started, 120)

            async def post(ids: range) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
                body = json.dumps({"input_ids": list(ids), "stream": True,
                                   "sampling_params": {"max_new_tokens": 1}}).encode()  # fmt: skip
                r, wr = await asyncio.open_connection("127.0.0.1", edge.bound_port)
                wr.write(b"POST /generate HTTP/1.1\r\nHost: e\r\nContent-Type: application/json"
                         b"\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip
                return r, wr

            try:
                r1, w1 = await post(range(100_000))
                await asyncio.sleep(0.3)
                _, w2 = await post(range(5, 4005))
                await asyncio.sleep(0.3)
                w2.transport.abort()  # the second client gives up while queued
                assert (await asyncio.wait_for(r1.readline(), GIVE_UP_S)).startswith(
                    b"HTTP/1.1 200"
                )
                await asyncio.wait_for(r1.readuntil(b"[DONE]"), GIVE_UP_S)
                w1.close()
                m = edge.service.metrics
                assert m.get("client_disconnect_total") == 1
                assert m.get("errors_total", type="internal") == 0
                loads = w.engine.loads
                for _ in range(int(GIVE_UP_S / 0.05)):
                    if loads.waiting == 0 and loads.running == 0:
                        break
                    await asyncio.sleep(0.05)
                assert loads.requests == 1  # the second request never took the GPU
                assert loads.prefill_uncached_tokens == 100_000
            finally:
                stop.set()
                await asyncio.wait_for(task, 60)

    asyncio.run(main())
