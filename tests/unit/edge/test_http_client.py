"""The forwarding hop's HTTP/1.1 client against raw loopback servers (edge.http_client)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from edge.http_client import HTTPError, Pool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(r: asyncio.StreamReader) -> bytes:
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await r.readexactly(length)


def _run(handler: Handler, client: Callable[[Pool], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Pool("127.0.0.1", port, 4)
        try:
            return await client(pool)
        finally:
            pool.close()
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def test_content_length_body__read_and_connection_reused() -> None:
    seen: list[bytes] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(2):  # two requests on one connection
            seen.append(await _read_request(r))
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello")
        w.close()

    async def client(pool: Pool) -> list[Any]:
        out = []
        for _ in range(2):
            resp = await pool.post("/p", b"{}", {"X-Request-Id": "r"}, 1.0, 1.0)
            out.append((resp.status, resp.headers["x-a"], await resp.read()))
            resp.release()
        return out

    got = _run(handler, client)
    assert got == [(200, "1", b"hello")] * 2
    assert len(seen) == 2 and b"X-Request-Id: r" in seen[0] and seen[0].endswith(b"{}")


def test_chunked_stream__chunks_yielded_without_framing() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for part in (b"data: 1\n\n", b"data: [DONE]\n\n"):
            w.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await w.drain()
        w.write(b"0\r\n\r\n")
        w.close()

    async def client(pool: Pool) -> bytes:
        resp = await pool.post("/s", b"", {}, 1.0, 1.0)
        body = b"".join([c async for c in resp.iter_chunks()])
        resp.release()
        return body

    assert _run(handler, client) == b"data: 1\n\ndata: [DONE]\n\n"


def test_close_delimited_body__read_to_eof() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
        w.close()

    async def client(pool: Pool) -> bytes:
        resp = await pool.post("/c", b"", {}, 1.0, 1.0)
        data = await resp.read()
        resp.release()
        return data

    assert _run(handler, client) == b"until the end"


def test_idle_connection_closed_by_server__request_resent_on_a_new_one() -> None:
    count = [0]

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        count[0] += 1
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await w.drain()
        w.close()  # closes after one request although the response said keep-alive

    async def client(pool: Pool) -> list[bytes]:
        out = []
        for _ in range(2):
            resp = await pool.post("/k", b"", {}, 1.0, 1.0)
            out.append(await resp.read())
            resp.release()
            await asyncio.sleep(0.05)
        return out

    assert _run(handler, client) == [b"ok", b"ok"] and count[0] == 2


def test_no_response_head__timeout_error() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        await asyncio.sleep(1.0)
        w.close()

    async def client(pool: Pool) -> None:
        await pool.post("/t", b"", {}, 1.0, 0.1)

    with pytest.raises(HTTPError) as info:
        _run(handler, client)
    assert info.value.reason == "timeout"


def test_not_http__protocol_error_and_refused_port__connect_error() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await _read_request(r)
        w.write(b"SSH-2.0-nope\r\n\r\n")
        w.close()

    async def client(pool: Pool) -> None:
        await pool.post("/x", b"", {}, 1.0, 1.0)

    with pytest.raises(HTTPError) as info:
        _run(handler, client)
    assert info.value.reason == "protocol"

    async def refused() -> None:
        await Pool("127.0.0.1", 1, 1).post("/x", b"", {}, 1.0, 1.0)

    with pytest.raises(HTTPError) as info:
        asyncio.run(refused())
    assert info.value.reason == "connect"
