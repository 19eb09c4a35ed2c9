"""SGLang's own gateway in PD mode (``sglang-router`` 0.3.2 from PyPI, ``--pd-disaggregation``,
the ``conformance`` extra) fronts an emulated prefill worker and an emulated decode worker
(``--disaggregation-mode prefill|decode``): requests on ``/generate`` (whole and streamed),
``/v1/completions`` and ``/v1/chat/completions`` complete, the prefill worker did every prefill
(its cache and counters; one token out each) and the decode worker every decode (no prefill, the
KV received from the prefill's bootstrap server, all the asked tokens), and no side logs an
error."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from e2e.commands import GATEWAY_MODULE
from kvcompass.byte_tokenizer import tokenize
from tests.integration.test_readme_quickstarts import _objects, quickstart
from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[2]
MODEL = "emulated/router-pd-test"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
PROMPT = "a shared system prompt for the disaggregated pair " * 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(mode: str) -> EmulatedWorker:
    costs = EmulatedCosts(time_scale=0.001)
    return EmulatedWorker(EmulatedConfig(
        model=MODEL, port=0, events_endpoint="tcp://127.0.0.1:*", replay_endpoint=None,
        costs=costs, disaggregation_mode=mode, disaggregation_bootstrap_port=0,
    ))  # fmt: skip


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> dict[str, Any]:
    async with http.post(url, json=body) as r:
        out: dict[str, Any] = await r.json(content_type=None)
        assert r.status == 200, out
        return out


async def _until_activated(log_path: Path, n: int) -> None:
    """Until the gateway has registered ``n`` workers (it does so in the background; a request
    before that is its ERROR "No prefill workers available")."""
    for _ in range(600):
        text = _ANSI.sub("", log_path.read_text(errors="replace"))
        if text.count("Activated 1 worker(s)") >= n:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"the gateway never activated {n} workers: {text[-3000:]}")


async def _scenario(log_path: Path) -> dict[str, Any]:
    prefill, decode = _worker("prefill"), _worker("decode")
    await prefill.start()
    await decode.start()
    port = _free_port()
    boot = prefill.info.disaggregation_bootstrap_port
    cmd = [sys.executable, "-m", GATEWAY_MODULE, "--pd-disaggregation", "--host", "127.0.0.1",
           "--port", str(port), "--policy", "random", "--log-level", "info",
           "--prometheus-host", "127.0.0.1", "--prometheus-port", str(_free_port()),
           "--prefill", prefill.url, str(boot), "--decode", decode.url]  # fmt: skip
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        async with aiohttp.ClientSession() as http:
            await _until_activated(log_path, 2)
            gen = {"text": PROMPT, "sampling_params": {"max_new_tokens": 5}}
            await _post(http, base + "/generate", gen)
            prefilled = prefill.engine.loads.prefill_prompt_tokens
            out: dict[str, Any] = {"generate": await _post(http, base + "/generate", gen)}
            out["completions"] = await _post(
                http, base + "/v1/completions", {"model": MODEL, "prompt": PROMPT, "max_tokens": 6}
            )
            chat = {"model": MODEL, "max_tokens": 7,
                    "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
            out["chat"] = await _post(http, base + "/v1/chat/completions", chat)
            stream = {**gen, "stream": True}
            async with http.post(base + "/generate", json=stream) as r:
                assert r.status == 200, await r.text()
                lines = [ln async for ln in r.content if ln.startswith(b"data: {")]
            out["streamed"] = [json.loads(ln[6:]) for ln in lines]
        out["prefill_loads"] = prefill.engine.loads
        out["decode_loads"] = decode.engine.loads
        out["prefilled_before"] = prefilled
        out["prefill_cached"] = sum(prefill.engine.cache.match(tokenize(PROMPT)))
        out["decode_cached"] = sum(decode.engine.cache.match(tokenize(PROMPT)))
        out["rooms_left"] = len(prefill.disagg.rooms)
        return out
    finally:
        proc.terminate()
        proc.wait(30)
        await prefill.close()
        await decode.close()


def test_sglang_router_pd_fronts_emulated_prefill_and_decode_workers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    log_path = tmp_path / "router.log"
    got = asyncio.run(_scenario(log_path))
    gateway = _ANSI.sub("", log_path.read_text(errors="replace"))
    # the decode worker's answers, with every asked token
    assert got["generate"]["meta_info"]["completion_tokens"] == 5, gateway[-3000:]
    assert len(got["generate"]["output_ids"]) == 5
    assert got["completions"]["usage"]["completion_tokens"] == 6
    assert got["chat"]["usage"]["completion_tokens"] == 7
    assert got["chat"]["choices"][0]["message"]["content"]
    streamed = got["streamed"]  # the decode worker's stream, relayed chunk by chunk
    assert len(streamed) == 5 and streamed[-1]["meta_info"]["completion_tokens"] == 5
    assert streamed[-1]["text"] == got["generate"]["text"]
    # the prefill worker prefilled the three requests (and holds the prompt), the decode none
    p, d = got["prefill_loads"], got["decode_loads"]
    assert p.prefill_prompt_tokens > got["prefilled_before"] >= len(PROMPT)
    assert p.prefill_cached_tokens > 0  # the later requests reused the first one's pages
    assert got["prefill_cached"] == len(PROMPT) // 16 * 16
    assert d.prefill_prompt_tokens == 0 and d.prefill_busy_us == 0
    assert got["decode_cached"] == 0
    assert d.requests == p.requests == 5  # one decode per prefill: every room was handed over
    assert got["rooms_left"] == 0
    assert d.running == 0 and p.running == 0
    errors = [line for line in gateway.splitlines() if " ERROR " in line]
    assert errors == [], errors
    ours = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert ours == [], [r.getMessage() for r in ours]


def test_pd_quickstart_of_workers_readme_runs_as_written(tmp_path: Path) -> None:
    """The ``quickstart:pd`` block of ``workers/README.md`` in one shell, as a user pastes it;
    substituted: ``kvcompass`` (a shim for this interpreter's ``python -m cli``), ``python``
    (this interpreter) and the fixed ports (free ones)."""
    shim = tmp_path / "bin" / "kvcompass"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cli "$@"\n')
    shim.chmod(0o755)
    script = quickstart(ROOT / "workers" / "README.md", "pd")
    script = re.sub(r"^python ", f"{sys.executable} ", script, flags=re.M)
    for port in ("30000", "30001", "8998", "5557", "5558", "5559", "8080", "29000"):
        script = re.sub(rf"\b{port}\b", str(_free_port()), script)
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    log, printed = tmp_path / "processes.log", tmp_path / "stdout.txt"
    with log.open("wb") as err, printed.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", "set -e\n" + script], cwd=tmp_path, env=env,
                                stdout=out, stderr=err, start_new_session=True)  # fmt: skip
    try:
        proc.wait(timeout=150)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the quickstart's background processes
    logs = log.read_text(errors="replace")
    assert proc.returncode == 0, logs[-4000:]
    # the router logs to stdout too: the answer is the JSON object with meta_info
    answer = next(a for a in _objects(printed.read_text(errors="replace")) if "meta_info" in a)
    assert answer["meta_info"]["completion_tokens"] == 4, answer  # the decode worker's answer
    assert answer["meta_info"]["prompt_tokens"] == len("hello, disaggregated fleet")
    ours = re.compile(r" ERROR (workers|kvcompass|cli)\.|Traceback")
    assert [ln for ln in logs.splitlines() if ours.search(ln)] == [], logs[-4000:]
