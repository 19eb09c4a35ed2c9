"""Prefill/decode disaggregation at the edge: the pair SGLang's PD router sends, for this
region's workers.

Owns ``PDConfig`` (the ``[pd]`` table: this region's decode workers and each prefill worker's
bootstrap port) and ``Disaggregation``, which turns one send to a local worker into the pair
SGLang's PD router (``sglang-router --pd-disaggregation``; its ``mini_lb.py`` shows the same
shape) sends: the same JSON body, plus ``bootstrap_host`` (the prefill worker's host),
``bootstrap_port`` (its ``--disaggregation-bootstrap-port``) and ``bootstrap_room`` (a random
63-bit integer shared by the two halves), POSTed at once to the prefill worker the decider chose
and to a decode worker of this region; the decode worker's answer is the response (streamed as
it streams), the prefill's one-token answer is read and dropped.

Which workers: the deployment's workers of a PD region are its *prefill* workers — the ones with
a radix cache, that publish KV events, that the index and the joint score know (SGLang's decode
workers keep no radix cache by default and publish nothing). Decode workers are picked by load
alone, as every peer does: the fewest requests this edge has open at each (every request bound
for the region's decode workers passes through this edge, the booking argument of architecture
§6, so the count is exact), ties in turn. Decode stays in the prefill's region: across regions
it never pays at the paper's bandwidths (``docs/disaggregation.md``). The decode worker reports
the prefill's ``cached_tokens`` (SGLang's decode takes it from the transfer metadata), so the
decider's feedback is unchanged. Must not decide which prefill worker serves (the decider does)
nor know HTTP above the upstream pools.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yarl

from edge.http_client import HTTPError, Pool, UpstreamResponse
from kvcompass.errors import ConfigError

log = logging.getLogger(__name__)

SGLANG_BOOTSTRAP_PORT = 8998
"""SGLang's default ``--disaggregation-bootstrap-port`` (``arg_groups/fields/disagg.py``)."""


@dataclass(frozen=True, slots=True)
class PDConfig:
    """``[pd]``: this region's workers run disaggregated."""

    decode: tuple[str, ...]
    """Base URLs of this region's decode workers (``--disaggregation-mode decode``)."""
    bootstrap_ports: tuple[tuple[int, int], ...] = ()
    """Prefill worker id → its ``--disaggregation-bootstrap-port`` (else ``bootstrap_port``)."""
    bootstrap_port: int = SGLANG_BOOTSTRAP_PORT

    def __post_init__(self) -> None:
        if not self.decode:
            raise ConfigError("pd.decode: expected the base URLs of this region's decode workers")
        for url in self.decode:
            u = yarl.URL(url)
            if u.scheme != "http" or u.host is None:
                raise ConfigError(f"pd.decode: expected http://host:port URLs, got {url!r}")
        for w, port in (*self.bootstrap_ports, (-1, self.bootstrap_port)):
            if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                raise ConfigError(f"pd.bootstrap_ports: expected ports 1..65535, got {port!r}"
                                  + (f" for worker {w}" if w >= 0 else ""))  # fmt: skip

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> PDConfig:
        unknown = sorted(set(table) - {"decode", "bootstrap_ports", "bootstrap_port"})
        if unknown:
            raise ConfigError(f"pd: unknown keys {unknown} (decode, bootstrap_ports, "
                              "bootstrap_port)")  # fmt: skip
        decode = table.get("decode", ())
        if isinstance(decode, str) or not all(isinstance(u, str) for u in decode):
            raise ConfigError(f"pd.decode: expected a list of URLs, got {decode!r}")
        try:
            given = dict(table.get("bootstrap_ports", {}))
            ports = tuple(sorted((int(k), v) for k, v in given.items()))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"pd.bootstrap_ports: expected worker id = port: {exc}") from None
        return cls(tuple(u.rstrip("/") for u in decode), ports,
                   table.get("bootstrap_port", SGLANG_BOOTSTRAP_PORT))  # fmt: skip


class Disaggregation:
    """Sends one request as a (prefill, decode) pair; counts this edge's open decodes."""

    def __init__(
        self,
        config: PDConfig,
        prefill_urls: Mapping[int, str],
        pool_size: int,
        on_prefill_error: Callable[[str], None] | None = None,
    ) -> None:
        ports = dict(config.bootstrap_ports)
        bad = sorted(set(ports) - set(prefill_urls))
        if bad:
            raise ConfigError(f"pd.bootstrap_ports: workers {bad} are not this region's workers")
        self.hosts = {w: str(yarl.URL(u).host) for w, u in prefill_urls.items()}
        self.ports = {w: ports.get(w, config.bootstrap_port) for w in prefill_urls}
        self.decode: list[tuple[Pool, str]] = []
        for url in config.decode:
            u = yarl.URL(url)
            self.decode.append((Pool(str(u.host), u.port or 80, pool_size), u.path.rstrip("/")))
        self.urls = config.decode
        self.open = [0] * len(self.decode)
        """Requests this edge has open at each decode worker (sent, response not released)."""
        self._turn = 0
        self._on_prefill_error = on_prefill_error
        self._prefills: set[asyncio.Task[None]] = set()

    def serves(self, worker: int) -> bool:
        """``worker`` is one of this region's prefill workers."""
        return worker in self.hosts

    def pick(self) -> int:
        """The decode worker with the fewest open requests; ties in turn."""
        least = min(self.open)
        n = len(self.open)
        for k in range(n):
            d = (self._turn + k) % n
            if self.open[d] == least:
                self._turn = (d + 1) % n
                return d
        raise AssertionError("unreachable")

    def with_bootstrap(self, worker: int, body: bytes, room: int) -> bytes:
        """``body`` (a JSON object) with the bootstrap fields of ``worker`` and ``room``."""
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("a PD request body must be a JSON object")
        data.update(bootstrap_host=self.hosts[worker], bootstrap_port=self.ports[worker],
                    bootstrap_room=room)  # fmt: skip
        return json.dumps(data, separators=(",", ":")).encode()

    async def send(
        self,
        worker: int,
        prefill: Pool,
        path: str,
        body: bytes,
        headers: Mapping[str, str],
        connect_s: float,
        first_byte_s: float,
    ) -> UpstreamResponse:
        """POST the pair; the decode worker's response (headers read). Raises ``HTTPError`` if
        the decode worker cannot be reached (the prefill half is then cancelled)."""
        room = secrets.randbits(63)
        data = self.with_bootstrap(worker, body, room)
        d = self.pick()
        self.open[d] += 1
        task = asyncio.ensure_future(
            self._prefill(worker, prefill, path, data, headers, connect_s, first_byte_s)
        )
        self._prefills.add(task)
        task.add_done_callback(self._prefills.discard)
        pool, prefix = self.decode[d]
        try:
            resp = await pool.post(prefix + path, data, headers, connect_s, first_byte_s)
        except BaseException:
            self.open[d] -= 1
            task.cancel()
            raise
        resp.when_released(lambda: self._end(d))
        return resp

    def _end(self, d: int) -> None:
        self.open[d] -= 1

    async def _prefill(
        self,
        worker: int,
        pool: Pool,
        path: str,
        data: bytes,
        headers: Mapping[str, str],
        connect_s: float,
        first_byte_s: float,
    ) -> None:
        """The prefill half: its one-token answer is read and dropped; a failure is logged and
        counted (the decode half then fails too and answers the client)."""
        try:
            resp = await pool.post(path, data, headers, connect_s, first_byte_s)
            try:
                detail = await resp.read()
            finally:
                resp.release()
            if resp.status != 200:
                text = detail[:200].decode("utf-8", "replace")
                self._failed(worker, f"status-{resp.status}", text)
        except (HTTPError, OSError, asyncio.IncompleteReadError) as exc:
            self._failed(worker, type(exc).__name__, repr(exc)[:200])

    def _failed(self, worker: int, reason: str, detail: str) -> None:
        log.warning("PD prefill at worker %d failed (%s): %s", worker, reason, detail)
        if self._on_prefill_error is not None:
            self._on_prefill_error(reason)

    async def close(self) -> None:
        for t in list(self._prefills):
            t.cancel()
        for pool, _ in self.decode:
            pool.close()
