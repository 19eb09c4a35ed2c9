"""Prefill/decode disaggregation in the emulated worker, as SGLang 0.5.23 runs it.

Owns the worker's PD role (``--disaggregation-mode null|prefill|decode``, SGLang's
``arg_groups/fields/disagg.py``), the request fields SGLang's PD router adds to every body
(``bootstrap_host``, ``bootstrap_port``, ``bootstrap_room``: the prefill worker's host, its
bootstrap port and a random room shared by the two halves of one request), the prefill worker's
bootstrap server (SGLang's ``CommonKVBootstrapServer`` listens on
``--disaggregation-bootstrap-port``, 8998 by default, with ``GET /health``) and the emulated KV
transfer. Must not: schedule prefills or decodes (``engine``) or parse whole request bodies
(the routes).

How one request runs: the router sends the same body to a prefill and a decode worker at once.
The prefill worker queues and prefills it as a mixed worker does (its radix cache, its KV
events), answers with one generated token (SGLang's prefill server samples the first token and
finishes the request, ``disaggregation/prefill.py``), and marks the room's KV ready. The decode
worker holds the request as running (SGLang's decode reserves its KV on arrival, the ``early``
allocation policy), asks the prefill's bootstrap server for the room (our route, not SGLang's:
``GET /kvcompass/kv?room=R`` answers ``{"room": R, "tokens": n, "cached_tokens": c}`` once the
prefill is done; the decode reports ``c`` as its ``cached_tokens``, as SGLang's decode reports
the prefill's),
sleeps the transfer (``EmulatedCosts.kv_transfer_ms``: the link's one-way latency plus the
prompt's KV bytes, ``kvcompass.costs.LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN`` each, over its
bandwidth), then decodes. Its radix cache stays empty and it publishes no KV events (SGLang
disables the decode radix cache unless ``--disaggregation-decode-enable-radix-cache``).
``bootstrap_host`` ``2.2.2.2`` is SGLang's ``FAKE_BOOTSTRAP_HOST`` (warmups): no transfer.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from kvcompass.errors import ConfigError
from workers.emulated.cache import Admission
from workers.emulated.engine import Engine
from workers.emulated.http_common import Invalid

MODES = ("null", "prefill", "decode")
TRANSFER_BACKENDS = ("mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp")
"""SGLang 0.5.23's ``DISAGG_TRANSFER_BACKEND_CHOICES`` (``arg_groups/choices.py``); the name is
reported, the transfer is the same emulation whichever is named (``fake``: none at all)."""
DEFAULT_BOOTSTRAP_PORT = 8998
FAKE_BOOTSTRAP_HOST = "2.2.2.2"
KV_ROUTE = "/kvcompass/kv"
MAX_ROOMS = 65_536
"""Rooms a prefill worker remembers whose decode half has not asked yet (oldest dropped)."""


class TransferFailed(Exception):
    """The decode worker could not get a request's KV from its prefill worker."""


def check_mode(mode: str, backend: str, bootstrap_port: int) -> None:
    if mode not in MODES:
        raise ConfigError(f"disaggregation_mode: expected one of {MODES}, got {mode!r}")
    if backend not in TRANSFER_BACKENDS:
        raise ConfigError(f"disaggregation_transfer_backend: expected one of "
                          f"{TRANSFER_BACKENDS}, got {backend!r}")  # fmt: skip
    if mode == "prefill" and backend == "fake":
        raise ConfigError("Prefill server does not support 'fake' as the transfer backend")
    if not 0 <= bootstrap_port < 65536:
        raise ConfigError(f"disaggregation_bootstrap_port: expected 0..65535, got {bootstrap_port}")


@dataclass(frozen=True, slots=True)
class Bootstrap:
    """Where a request's KV comes from: the prefill worker's bootstrap server and the room."""

    host: str
    port: int | None
    room: int

    @property
    def fake(self) -> bool:
        return self.host == FAKE_BOOTSTRAP_HOST


def bootstrap_of(body: dict[str, Any], mode: str) -> Bootstrap | None:
    """The bootstrap fields of a request body; required in PD mode, ignored otherwise. A batch
    (lists, one room per prompt) is refused: the emulated worker serves one prompt per PD
    request."""
    if mode == "null":
        return None
    host, port, room = (body.get(k) for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room"))
    if host is None or room is None:
        raise Invalid(f"disaggregation mode {mode}: bootstrap_host and bootstrap_room are "
                      "required (SGLang's PD router adds them)")  # fmt: skip
    if not isinstance(host, str) or not host:
        raise Invalid(f"bootstrap_host: expected a host name, got {host!r}")
    if type(room) is not int or room < 0:
        raise Invalid(f"bootstrap_room: expected one non-negative integer, got {room!r}")
    if port is not None and (type(port) is not int or not 0 < port < 65536):
        raise Invalid(f"bootstrap_port: expected a port or null, got {port!r}")
    return Bootstrap(host, port, room)


class Rooms:
    """Prefill side: room → the prompt tokens whose KV is ready and how many of them the prefill
    found cached (or why it never will be). Either half may come first: the decode's question
    waits for the prefill's answer."""

    def __init__(self) -> None:
        self._rooms: OrderedDict[int, asyncio.Future[tuple[int, int] | str]] = OrderedDict()
        """room → (prompt tokens, cached tokens), or why the prefill failed (a str: never a
        future's exception, which would be logged as never retrieved if the decode never asks)."""

    def _future(self, room: int) -> asyncio.Future[tuple[int, int] | str]:
        fut = self._rooms.get(room)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._rooms[room] = fut
            while len(self._rooms) > MAX_ROOMS:
                _, old = self._rooms.popitem(last=False)
                if not old.done():
                    old.set_result("dropped: too many rooms waiting")
        return fut

    def ready(self, room: int, tokens: int, cached: int = 0) -> None:
        fut = self._future(room)
        if not fut.done():
            fut.set_result((tokens, cached))

    def fail(self, room: int, reason: str) -> None:
        fut = self._future(room)
        if not fut.done():
            fut.set_result(reason)

    async def wait(self, room: int, timeout_s: float) -> tuple[int, int]:
        """The room's (prompt tokens, cached tokens) once its prefill is done;
        ``TransferFailed`` if it failed, ``TimeoutError`` after ``timeout_s``."""
        fut = self._future(room)
        try:
            got = await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        finally:
            if fut.done() and self._rooms.get(room) is fut:
                del self._rooms[room]
        if isinstance(got, str):
            raise TransferFailed(got)
        return got

    def __len__(self) -> int:
        return len(self._rooms)


class Disagg:
    """One worker's PD role: admits a request as its mode does (``admit``)."""

    def __init__(self, mode: str, backend: str, timeout_s: float = 300.0) -> None:
        self.mode = mode
        self.backend = backend
        self.timeout_s = timeout_s
        """How long a decode waits for its KV (SGLang: ``SGLANG_DISAGGREGATION_WAITING_TIMEOUT``,
        300 s), wall seconds; then the request fails with a 500."""
        self.rooms = Rooms()
        self._http: aiohttp.ClientSession | None = None

    def max_new(self, asked: int) -> int:
        """A prefill worker generates the first token only."""
        return min(asked, 1) if self.mode == "prefill" else asked

    async def admit(
        self,
        engine: Engine,
        tokens: list[int],
        bootstrap: Bootstrap | None,
        gone: Callable[[], bool] | None,
        salt: str | None = None,
    ) -> Admission:
        if self.mode == "null" or bootstrap is None:
            return await engine.prefill(tokens, gone, salt)
        if self.mode == "prefill":
            try:
                adm = await engine.prefill(tokens, gone, salt)
            except BaseException as exc:
                if not bootstrap.fake:
                    self.rooms.fail(bootstrap.room, f"the prefill failed: {exc!r}")
                raise
            if not bootstrap.fake:
                self.rooms.ready(bootstrap.room, adm.prompt_tokens, adm.cached_tokens)
            return adm
        return await engine.receive(tokens, lambda: self._transfer_s(engine, bootstrap))

    async def _transfer_s(self, engine: Engine, bs: Bootstrap) -> tuple[float, int]:
        """Wait for the prefill's KV; the wall seconds its transfer takes, and the tokens the
        prefill found cached (SGLang's decode reports the prefill's ``cached_tokens``, which
        its transfer metadata carries: ``_commit_transfer_to_req``)."""
        if bs.fake or self.backend == "fake":
            return 0.0, 0
        if bs.port is None:
            raise TransferFailed(f"room {bs.room}: no bootstrap_port (start the router with "
                                 "--prefill URL BOOTSTRAP_PORT)")  # fmt: skip
        if self._http is None:
            self._http = aiohttp.ClientSession()
        url = f"http://{bs.host}:{bs.port}{KV_ROUTE}"
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s + 5)
            async with self._http.get(url, params={"room": str(bs.room)}, timeout=timeout) as r:
                body = await r.json()
                if r.status != 200:
                    raise TransferFailed(f"room {bs.room}: {url} answered {r.status}: {body}")
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise TransferFailed(f"room {bs.room}: no KV from {url}: {exc!r}") from None
        seconds = engine.costs.sleep_s(engine.costs.kv_transfer_ms(int(body["tokens"])))
        return seconds, int(body.get("cached_tokens", 0))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()


DISAGG = web.AppKey("disagg", Disagg)


def bootstrap_app(disagg: Disagg) -> web.Application:
    """The prefill worker's bootstrap server: SGLang's ``GET /health``, and the room route the
    emulated decode workers ask."""

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def kv(request: web.Request) -> web.Response:
        raw = request.query.get("room", "")
        if not raw.isdigit():
            return web.json_response(
                {"error": f"room: expected an integer, got {raw!r}"}, status=400
            )
        room = int(raw)
        try:
            tokens, cached = await disagg.rooms.wait(room, disagg.timeout_s)
        except TimeoutError:
            return web.json_response({"error": f"room {room}: no prefill came"}, status=504)
        except TransferFailed as exc:
            return web.json_response({"error": f"room {room}: {exc}"}, status=500)
        return web.json_response({"room": room, "tokens": tokens, "cached_tokens": cached})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get(KV_ROUTE, kv)
    return app
