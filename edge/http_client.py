"""A lean HTTP/1.1 client for the forwarding hop: keep-alive pools, streaming bodies, nothing else.

Owns the wire of one edge → worker request: ``POST <path> HTTP/1.1`` with ``Content-Length``,
the status line and headers of the answer, and its body framed by ``Content-Length``, by
``Transfer-Encoding: chunked`` or by the connection closing. Must not route, retry on another
worker, or parse bodies (``edge.forwarder`` and ``edge.handlers`` do).

Why not aiohttp's client: on the forwarding path it costs ~95 µs of CPU per request more than
this (cookie jar, tracing hooks, timers, URL objects, multidict copies), measured against the same
aiohttp server; the edge's whole budget is a fraction of a millisecond. The edge never needs
redirects, cookies, proxies, TLS to workers on a private network, or compression, so this covers
the protocol it actually speaks. ``GET /v1/loads`` (off the request path) still uses aiohttp.

A pooled connection the worker has closed while idle shows up as EOF before any response byte;
such a request is resent once on a fresh connection (it never reached the worker's handler).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping

from multidict import CIMultiDict

_MAX_HEAD_BYTES = 64 * 1024


class HTTPError(Exception):
    """Connect failure, timeout, or a response that is not HTTP/1.x."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class UpstreamResponse:
    """Status, headers and a body to read once (``read`` or ``iter_chunks``), then ``release``."""

    __slots__ = ("_chunked", "_conn", "_done", "_keep", "_left", "_on_release", "_pool", "headers",
                 "status")  # fmt: skip

    def __init__(
        self, pool: Pool, conn: _Conn, status: int, headers: CIMultiDict[str], keep: bool
    ) -> None:
        self._pool = pool
        self._conn = conn
        self.status = status
        self.headers = headers
        te = headers.get("Transfer-Encoding", "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("Content-Length")
        self._left = int(cl) if cl is not None and not self._chunked else -1
        self._keep = keep and (self._chunked or self._left >= 0)
        self._done = self._left == 0
        self._on_release: Callable[[], None] | None = None

    def when_released(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once, at ``release`` (whoever reads the body ends it)."""
        self._on_release = callback

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (chunk framing removed)."""
        r = self._conn.reader
        if self._chunked:
            while True:
                size_line = await r.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    await r.readuntil(b"\r\n")  # no trailers from the workers we speak to
                    break
                data = await r.readexactly(size + 2)
                yield data[:-2]
        elif self._left >= 0:
            while self._left > 0:
                data = await r.read(min(self._left, 1 << 16))
                if not data:
                    raise HTTPError("protocol", "connection closed inside the body")
                self._left -= len(data)
                yield data
        else:
            while data := await r.read(1 << 16):
                yield data
        self._done = True

    async def read(self) -> bytes:
        if self._left > 0 and not self._chunked:
            data = await self._conn.reader.readexactly(self._left)
            self._left = 0
            self._done = True
            return data
        return b"".join([c async for c in self.iter_chunks()])

    def release(self) -> None:
        """Back to the pool if the body was read to its end on a keep-alive connection."""
        conn, self._conn = self._conn, None  # type: ignore[assignment]
        if conn is None:
            return
        if self._on_release is not None:
            callback, self._on_release = self._on_release, None
            callback()
        if self._done and self._keep:
            self._pool.put(conn)
        else:
            conn.close()


class Pool:
    """Keep-alive connections to one ``host:port``."""

    def __init__(self, host: str, port: int, max_idle: int) -> None:
        self.host = host
        self.port = port
        self.max_idle = max_idle
        self._idle: list[_Conn] = []
        self._host_header = f"{host}:{port}".encode()

    def put(self, conn: _Conn) -> None:
        if len(self._idle) < self.max_idle and not conn.writer.is_closing():
            self._idle.append(conn)
        else:
            conn.close()

    async def _connect(self, timeout_s: float) -> _Conn:
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except TimeoutError as exc:
            raise HTTPError("timeout", f"connect to {self.host}:{self.port}") from exc
        except OSError as exc:
            raise HTTPError("connect", f"{self.host}:{self.port}: {exc}") from exc
        return _Conn(reader, writer)

    async def post(
        self,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        connect_timeout_s: float,
        first_byte_timeout_s: float,
    ) -> UpstreamResponse:
        head = [b"POST ", path.encode(), b" HTTP/1.1\r\nHost: ", self._host_header,
                b"\r\nContent-Length: ", str(len(body)).encode(), b"\r\n"]  # fmt: skip
        for k, v in headers.items():
            head += [k.encode(), b": ", v.encode(), b"\r\n"]
        head.append(b"\r\n")
        request = b"".join(head) + body
        for attempt in range(2):
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._connect(connect_timeout_s)
            try:
                conn.writer.write(request)
                async with asyncio.timeout(first_byte_timeout_s):
                    raw = await conn.reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue  # the worker closed this idle connection: resend on a new one
                raise HTTPError("connect", f"{self.host}:{self.port}: {exc!r}") from exc
            except TimeoutError as exc:
                conn.close()
                raise HTTPError("timeout", f"no response from {self.host}:{self.port}") from exc
            except asyncio.LimitOverrunError as exc:
                conn.close()
                raise HTTPError("protocol", "response head too large") from exc
            except BaseException:  # cancelled (the client left): the worker sees a disconnect
                conn.close()
                raise
            return self._response(conn, raw)
        raise HTTPError("connect", f"{self.host}:{self.port}: closed twice")  # pragma: no cover

    def _response(self, conn: _Conn, raw: bytes) -> UpstreamResponse:
        lines = raw.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            conn.close()
            raise HTTPError("protocol", f"bad status line {lines[0][:80]!r}")
        headers: CIMultiDict[str] = CIMultiDict()
        for line in lines[1:]:
            if line:
                k, _, v = line.partition(":")
                headers.add(k.strip(), v.strip())
        keep = parts[0] == "HTTP/1.1" and headers.get("Connection", "").lower() != "close"
        return UpstreamResponse(self, conn, int(parts[1]), headers, keep)

    def close(self) -> None:
        for c in self._idle:
            c.close()
        self._idle.clear()
