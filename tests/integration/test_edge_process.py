"""The edge as a real process (``kvcompass edge`` CLI): serves, and drains on SIGTERM.

A request in flight when SIGTERM arrives still completes with 200; then the process exits 0 and
the port is closed. The worker is an emulated SGLang worker in this test process whose decode
takes ~0.6 s, so the request is surely in flight when the signal lands.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import aiohttp
import pytest

from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
ROOT = Path(__file__).resolve().parents[2]
LAUNCH = textwrap.dedent(
    """
    import argparse, sys
    from cli import edge
    p = argparse.ArgumentParser(); sub = p.add_subparsers()
    edge.register(sub)
    args = p.parse_args(sys.argv[1:])
    sys.exit(args.func(args))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm__in_flight_request_drained_then_clean_exit(tmp_path: Path) -> None:
    async def scenario() -> None:
        costs = EmulatedCosts(time_scale=1.0, decode_ms_per_token=20.0, prefill_ms_per_token=0.0)
        cfg = EmulatedConfig(model="m", port=0, events_endpoint="tcp://127.0.0.1:*",
                             replay_endpoint=None, costs=costs)  # fmt: skip
        async with EmulatedWorker(cfg) as worker:
            port = _free_port()
            conf = tmp_path / "edge.toml"
            conf.write_text(
                f'[edge]\nmodel = "m"\nport = {port}\nloads_poll_period_ms = 50.0\n'
                f'[workers]\n0 = "{worker.url}"\n'
            )
            proc = subprocess.Popen(
                [sys.executable, "-c", LAUNCH, "edge", "--region", "us", "--config", str(conf),
                 "--deployment", "paper-testbed-14x3"],
                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            try:
                await _serve_then_terminate(proc, port)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)

    asyncio.run(scenario())


async def _serve_then_terminate(proc: subprocess.Popen[bytes], port: int) -> None:
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as s:
        for _ in range(300):  # bounded: up to ~30 s for the interpreter + numba to start
            try:
                async with s.get(base + "/health") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                assert proc.poll() is None, "edge exited before serving"
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("edge did not come up")
        body = {"text": "drain me", "sampling_params": {"max_new_tokens": 30}}
        pending = asyncio.create_task(s.post(base + "/generate", json=body))
        await asyncio.sleep(0.2)  # the request is at the worker, decoding
        proc.send_signal(signal.SIGTERM)
        resp = await pending
        assert resp.status == 200
        assert len((await resp.json())["output_ids"]) == 30
    rc = await asyncio.to_thread(proc.wait, 30)
    assert rc == 0
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
