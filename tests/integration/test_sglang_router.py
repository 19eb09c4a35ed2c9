"""SGLang's own gateway (``sglang-router`` 0.3.2 from PyPI, the ``conformance`` extra) fronts two
emulated workers: it registers them (its gRPC probe, ``/model_info``, ``/server_info``), routes
``/generate``, ``/v1/completions`` and ``/v1/chat/completions`` to them, and neither side logs an
error (the gateway's output has no ERROR line; the workers log nothing at WARNING or above)."""

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

from e2e import commands
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
