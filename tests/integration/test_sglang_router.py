"""SGLang's own gateway (``sglang-router`` 0.3.2 from PyPI, the ``conformance`` extra) fronts two
emulated workers: it registers them (its gRPC probe, ``/model_info``, ``/server_info``), routes
``/generate``, ``/v1/completions`` and ``/v1/chat/completions`` to them, and neither side logs an
error (the gateway's output has no ERROR line; the workers log nothing at WARNING or above).

``power_of_two`` polls each worker's ``/get_load`` for token loads; SGLang 0.5.23 has no such
route (404), and neither has the emulated worker by default, so the router gets no loads from
ours, as from the real one (``test_power_of_two__...``)."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from e2e import commands, probes
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
MODEL = "emulated/router-test"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _until_routed(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> int:
    """POST until the gateway has registered a worker (it does so in the background)."""
    status = 0
    for _ in range(300):
        try:
            async with http.post(url, json=body) as r:
                status = r.status
                await r.read()
                if status == 200:
                    return status
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.1)
    return status


async def _scenario(log_path: Path) -> list[int]:
    costs = EmulatedCosts(time_scale=0.0)
    cfgs = [EmulatedConfig(model=MODEL, port=0, events_endpoint="tcp://127.0.0.1:*",
                           replay_endpoint=None, costs=costs) for _ in range(2)]  # fmt: skip
    workers = [EmulatedWorker(c) for c in cfgs]
    for w in workers:
        await w.start()
    port = _free_port()
    # the demo's command line (e2e.commands.gateway), at info level to see the registrations
    cmd = commands.gateway([w.url for w in workers], port, _free_port())
    cmd[cmd.index("--log-level") + 1] = "info"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            gen = {"text": "hello router", "sampling_params": {"max_new_tokens": 3}}
            statuses = [await _until_routed(http, base + "/generate", gen)]
            comp = {"model": MODEL, "prompt": "hello router", "max_tokens": 3}
            chat = {"model": MODEL, "max_tokens": 3,
                    "messages": [{"role": "user", "content": "hello"}]}  # fmt: skip
            for path, body in (("/v1/completions", comp), ("/v1/chat/completions", chat)):
                async with http.post(base + path, json=body) as r:
                    statuses.append(r.status)
                    await r.read()
        return statuses
    finally:
        proc.terminate()
        proc.wait(30)
        for w in workers:
            await w.close()


def test_sglang_router_fronts_emulated_workers__no_error_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    log_path = tmp_path / "router.log"
    statuses = asyncio.run(_scenario(log_path))
    gateway = _ANSI.sub("", log_path.read_text(errors="replace"))
    assert statuses == [200, 200, 200], gateway[-3000:]
    assert "Activated" in gateway  # it registered the workers
    errors = [line for line in gateway.splitlines() if " ERROR " in line]
    assert errors == [], errors
    ours = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert ours == [], [r.getMessage() for r in ours]


def _log(path: Path) -> str:
    return _ANSI.sub("", path.read_text(errors="replace"))


N_SHORT = 20


async def _power_of_two(log_path: Path, enable_get_load: bool) -> tuple[list[int], list[int]]:
    """Two emulated workers behind ``power_of_two``. One long request through the router keeps
    one worker busy; once the router's load monitor has polled the workers during it (every
    30 s, not configurable), ``N_SHORT`` short requests follow, one at a time. Returns the
    workers' request counts before and after the short ones."""
    costs = EmulatedCosts(time_scale=1.0)
    cfgs = [EmulatedConfig(model=MODEL, port=0, events_endpoint="tcp://127.0.0.1:*",
                           replay_endpoint=None, costs=costs,
                           enable_get_load=enable_get_load) for _ in range(2)]  # fmt: skip
    workers = [EmulatedWorker(c) for c in cfgs]
    for w in workers:
        await w.start()
    port = _free_port()
    cmd = commands.gateway([w.url for w in workers], port, _free_port())
    cmd[cmd.index("--policy") + 1] = "power_of_two"
    cmd[cmd.index("--log-level") + 1] = "debug"  # "Fetched loads from N workers" is a debug line
    with log_path.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            while await asyncio.to_thread(probes.gateway_workers, base) < 2:
                await asyncio.sleep(0.1)
            long = {"text": "keep me busy", "sampling_params": {"max_new_tokens": 100_000}}
            busy = asyncio.create_task(http.post(base + "/generate", json=long))
            while not any(w.engine.loads.running for w in workers):
                await asyncio.sleep(0.05)
            polls = _log(log_path).count("Fetched loads from 2 workers")
            while _log(log_path).count("Fetched loads from 2 workers") == polls:
                assert proc.poll() is None, _log(log_path)[-3000:]
                await asyncio.sleep(0.2)
            before = [w.engine.loads.requests for w in workers]
            short = {"text": "short", "sampling_params": {"max_new_tokens": 1}}
            for _ in range(N_SHORT):
                async with http.post(base + "/generate", json=short) as r:
                    assert r.status == 200, await r.text()
            after = [w.engine.loads.requests for w in workers]
            busy.cancel()
        return before, after
    finally:
        proc.terminate()
        proc.wait(30)
        for w in workers:
            await w.close()


def test_power_of_two__blind_to_load_as_with_sglang_0_5_23__token_loads_with_get_load(
    tmp_path: Path,
) -> None:
    """sglang-router 0.3.2 records a failed ``/get_load`` (SGLang 0.5.23's 404) as load -1 and
    compares those (its later releases stopped caching -1 for this reason): with both workers at
    -1 it picks one of the two at random, busy or not, whatever its own in-flight counts. The
    emulated workers by default give the router exactly that; with ``--enable-get-load`` it
    reads their token loads and avoids the busy one. Both setups run side by side (one 30 s
    poll)."""

    async def both() -> list[tuple[list[int], list[int]]]:
        return list(await asyncio.gather(
            _power_of_two(tmp_path / "default.log", enable_get_load=False),
            _power_of_two(tmp_path / "get_load.log", enable_get_load=True),
        ))  # fmt: skip

    (before, after), (before_gl, after_gl) = asyncio.run(both())
    for b in (before, before_gl):
        assert sorted(b) == [0, 1], b  # the long request: on one worker, the other idle
    busy, busy_gl = before.index(1), before_gl.index(1)
    # default (as SGLang 0.5.23): the busy worker gets short ones too (all 20 on the idle one
    # by chance: 2^-20)
    assert after[busy] > 1 and sum(after) == 1 + N_SHORT, after
    # --enable-get-load: the router saw the busy worker's tokens; every short one avoids it
    assert after_gl[busy_gl] == 1 and after_gl[1 - busy_gl] == N_SHORT, after_gl
