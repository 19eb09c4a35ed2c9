"""Sending a routed request to its worker: one keep-alive pool per worker, emulated WAN.

Owns the pools (``edge.http_client.Pool`` per worker, so a slow worker cannot starve the
others; ``GET /v1/loads`` goes through an aiohttp session per worker), where a request goes
(the worker itself, or — for a worker of another region whose edge is listed in
``EdgeConfig.peers`` — that edge, with ``X-KVC-Forward-To``, signed: ``edge.relay_auth``), the
connect / first-byte
timeouts, and the emulated WAN. Must not decide anything or read bodies: it returns the open
``UpstreamResponse`` and the handler streams it. Worker URLs are ``http://`` (a private network;
no TLS on this hop).

Emulated WAN (tests and benchmarks; real netem is out of scope): for a worker outside the
edge's region the forwarder sleeps ``wan_one_way_ms[o][r] × wan_delay_scale`` before sending and
again when the response headers arrive (request and response each cross the WAN once). With
scale 0 (the default) nothing sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
import yarl

from edge.feedback import RELAY_HEADER
from edge.http_client import HTTPError, Pool, UpstreamResponse
from edge.pd import Disaggregation
from edge.relay_auth import SIGNATURE_HEADER, RelayAuth
from kvcompass.errors import ConfigError


class ForwardError(Exception):
    """The worker could not be reached, timed out, or answered with a retriable status."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class WorkerRoute:
    """Where requests for one worker go."""

    worker: int
    base_url: str
    relayed: bool
    """True: ``base_url`` is the worker's region's edge, which forwards to the worker."""
    one_way_delay_s: float


RETRIABLE_STATUS = frozenset({429, 500, 502, 503, 504})


class Forwarder:
    """Per-worker pools; ``send`` opens a request and returns the response (headers read)."""

    def __init__(
        self,
        routes: Mapping[int, WorkerRoute],
        *,
        pool_size: int,
        connect_timeout_ms: float,
        first_byte_timeout_ms: float,
        pd: Disaggregation | None = None,
        relay_auth: RelayAuth | None = None,
    ) -> None:
        """``pd``: this region's workers run disaggregated; a send to one of them is the
        (prefill, decode) pair (``edge.pd``). ``relay_auth`` signs every relay to a peer edge
        (``edge.relay_auth``; required when a route is relayed)."""
        self.routes = dict(routes)
        self.relay_auth = relay_auth
        if relay_auth is None and any(r.relayed for r in self.routes.values()):
            raise ConfigError("peers: relays between edges need edge.relay_key")
        self.pd = pd
        self._pool_size = pool_size
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=connect_timeout_ms / 1000.0,
            sock_read=first_byte_timeout_ms / 1000.0,
        )
        self._sessions: dict[int, aiohttp.ClientSession] = {}
        self._pools: dict[int, tuple[Pool, str]] = {}
        self._connect_s = connect_timeout_ms / 1000.0
        self._first_byte_s = first_byte_timeout_ms / 1000.0
        for w, route in self.routes.items():
            url = yarl.URL(route.base_url)
            if url.scheme != "http" or url.host is None:
                raise ConfigError(f"worker {w}: expected an http://host:port URL, got "
                                  f"{route.base_url!r}")  # fmt: skip
            port = url.port or 80
            self._pools[w] = (Pool(url.host, port, pool_size), url.path.rstrip("/"))

    def reachable(self, worker: int) -> bool:
        return worker in self.routes

    def relayed(self, worker: int) -> bool:
        """Whether requests for ``worker`` go through its region's edge."""
        route = self.routes.get(worker)
        return route is not None and route.relayed

    def _session(self, worker: int) -> aiohttp.ClientSession:
        s = self._sessions.get(worker)
        if s is None or s.closed:
            conn = aiohttp.TCPConnector(limit=4, ttl_dns_cache=300)
            s = aiohttp.ClientSession(
                connector=conn,
                timeout=self._timeout,
                auto_decompress=False,
                trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(),
            )
            self._sessions[worker] = s
        return s

    async def send(
        self,
        worker: int,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        relay_headers: Mapping[str, str] | None = None,
    ) -> UpstreamResponse:
        """POST ``body`` to the worker's ``path``; raises ``ForwardError`` (retry elsewhere).
        ``relay_headers`` (the client's credentials) go only to a peer edge, never a worker."""
        route = self.routes[worker]
        pool, prefix = self._pools[worker]
        hdrs = headers
        if route.relayed and self.relay_auth is not None:
            hdrs = {**headers, **(relay_headers or {}), RELAY_HEADER: str(worker)}
            hdrs[SIGNATURE_HEADER] = self.relay_auth.sign(path, body, hdrs)
        if route.one_way_delay_s > 0:
            await asyncio.sleep(route.one_way_delay_s)
        try:
            if self.pd is not None and not route.relayed and self.pd.serves(worker):
                resp = await self.pd.send(worker, pool, prefix + path, body, hdrs,
                                          self._connect_s, self._first_byte_s)  # fmt: skip
            else:
                resp = await pool.post(prefix + path, body, hdrs, self._connect_s,
                                       self._first_byte_s)  # fmt: skip
        except HTTPError as exc:
            raise ForwardError(exc.reason, f"worker {worker}: {exc}") from exc
        if resp.status in RETRIABLE_STATUS:
            try:
                detail = (await resp.read())[:200].decode("utf-8", "replace")
            except (HTTPError, OSError, asyncio.IncompleteReadError) as exc:
                detail = repr(exc)
            resp.release()
            raise ForwardError(f"status-{resp.status}", f"worker {worker}: {detail}")
        if route.one_way_delay_s > 0:
            await asyncio.sleep(route.one_way_delay_s)
        return resp

    async def get_json(self, worker: int, path: str, timeout_s: float) -> object:
        """GET a JSON document from a worker itself (``/v1/loads``); raises on any failure."""
        route = self.routes[worker]
        t = aiohttp.ClientTimeout(total=timeout_s)
        async with self._session(worker).get(route.base_url + path, timeout=t) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def close(self) -> None:
        for s in self._sessions.values():
            await s.close()
        self._sessions.clear()
        for pool, _ in self._pools.values():
            pool.close()
        if self.pd is not None:
            await self.pd.close()
