"""Connection hygiene of the edge's HTTP server: a cap on open connections, and the timeouts.

Owns ``CappedTCPSite``, the aiohttp site the edge listens with: a protocol factory in front of
aiohttp's ``web.Server`` that answers ``503`` and closes when ``max_connections`` are already
open (aiohttp has no such cap; each held connection costs a file descriptor and a task), and
``server_timeouts``, the aiohttp handler arguments derived from ``EdgeConfig``.

How the timeouts are enforced (aiohttp 3.x, ``web_protocol.RequestHandler``):
- ``keepalive_timeout_ms``: aiohttp starts one deadline when a connection opens and again when a
  response ends; a connection with no complete request head by then is closed. So it is both the
  idle keep-alive timeout and the header-read timeout (slowloris), one aiohttp timer.
- ``body_timeout_ms``: the request handlers read a body under ``asyncio.timeout``
  (``edge.handlers.read_body``): a body never sent, or shorter than its ``Content-Length``, gets
  408 and the connection is closed.

Must not: know requests or routing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from edge.config import EdgeConfig

LINGER_S = 1.0
_REFUSAL_BODY = (
    b'{"error": {"message": "edge: too many open connections, retry later", '
    b'"type": "server_error", "param": null, "code": 503}}'
)
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nRetry-After: 1\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)


def server_timeouts(config: EdgeConfig) -> dict[str, Any]:
    """Keyword arguments of ``web.AppRunner`` (passed on to aiohttp's request handler).

    ``lingering_time``: after an error answered before the body was read (408, 413), aiohttp
    reads and drops the rest of the body for up to this long before closing, so a client still
    uploading sees the answer rather than a reset; its default, 10 s, let a client that never
    sends the body hold the connection 10 s past its 408. Here at most ``LINGER_S``.
    """
    return {
        "keepalive_timeout": config.keepalive_timeout_ms / 1000.0,
        "lingering_time": min(LINGER_S, config.body_timeout_ms / 1000.0),
    }


class _Refuse(asyncio.Protocol):
    """Answers 503 at once and closes: the client learns to back off instead of hanging."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(_REFUSAL)
        transport.close()


class CappedTCPSite(web.TCPSite):
    """``web.TCPSite`` that refuses connections beyond ``max_connections`` (``on_refused`` each)."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        *,
        max_connections: int,
        on_refused: Callable[[], None],
    ) -> None:
        super().__init__(runner, host, port)
        self._cap = max_connections
        self._on_refused = on_refused
        self._bind = (host, port)

    def _protocol(self) -> asyncio.BaseProtocol:
        server = self._runner.server
        assert server is not None
        if len(server.connections) >= self._cap:
            self._on_refused()
            return _Refuse()
        return server()

    async def start(self) -> None:
        # BaseSite.start registers the site with the runner (addresses, cleanup); TCPSite.start
        # would then bind aiohttp's factory directly, so the binding is done here instead.
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._protocol, *self._bind, reuse_address=True)
