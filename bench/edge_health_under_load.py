"""``/health`` latency of an edge while oversized requests are in flight (issue 26 item 6).

Three processes on loopback: one edge (``edge.app``, the real handlers, the built-in tokenizer,
``max_context_tokens`` 32,768), a flood process sending the oversized requests, and this driver,
which only asks ``/health`` (its own loop busy with nothing else, so the edge is what is
measured). The driver asks ``/health`` ``--idle`` times with nothing else in flight; then the
flood process sends ``--requests`` concurrent ``/v1/completions`` of ``--prompt-mb`` MB each (all
answered 400: over the context length), and the driver asks ``/health`` one at a time, back to
back, until the flood process has every answer. ``text``: a text prompt (refused from
its length before tokenizing); ``ids``: a prompt of token ids (decoded and checked off the loop).
Printed: the idle and loaded ``/health`` latencies (p50, p99, max, ms), how many were asked while
loaded, and how long the flood took. Before the fix (bodies decoded and tokenized on the event
loop) a ``/health`` waited for every body parsed ahead of it: 3.5 s in the issue's run.

    python bench/edge_health_under_load.py [--requests 60] [--prompt-mb 3.9] [--kind text] [--json]

The worker URL the edge is given is never called (every request is refused before routing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)  # this file is bench/…: "import edge" must find the package
MODEL = "bench-model"
DEPLOYMENT = "paper-testbed-14x3"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _edge(port: int) -> None:
    from aiohttp import web

    from edge.app import assemble, build_app
    from edge.config import EdgeConfig
    from wire.deployments import load_deployment

    dep = load_deployment(DEPLOYMENT)
    workers = {str(w): "http://127.0.0.1:9" for w in range(dep.n_workers)}
    cfg = EdgeConfig.from_mapping({"region": "us", "model": MODEL, "port": port,
                                   "loads_poll_period_ms": 0.0,
                                   "max_context_tokens": 32_768}, workers)  # fmt: skip
    web.run_app(build_app(assemble(cfg, dep)), host="127.0.0.1", port=port, access_log=None,
                print=None)  # fmt: skip


async def _health_ms(s: aiohttp.ClientSession, url: str) -> float:
    t0 = time.perf_counter()
    async with s.get(url + "/health") as r:
        await r.read()
        assert r.status == 200, r.status
    return (time.perf_counter() - t0) * 1000


def _stats(ms: list[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2),
            "p99_ms": round(float(np.percentile(a, 99)), 2),
            "max_ms": round(float(a.max()), 2), "n": int(a.size)}  # fmt: skip


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, __file__, "--role", "edge", "--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as s:
            for _ in range(600):  # bounded: ~60 s
                if proc.poll() is not None:
                    raise RuntimeError(f"edge exited with {proc.returncode}")
                try:
                    await _health_ms(s, url)
                    break
                except aiohttp.ClientError:
                    await asyncio.sleep(0.1)
            idle = [await _health_ms(s, url) for _ in range(args.idle)]
            flood_cmd = [sys.executable, __file__, "--role", "flood", "--port", str(port),
                         "--kind", args.kind, "--requests", str(args.requests),
                         "--prompt-mb", str(args.prompt_mb)]  # fmt: skip
            t0 = time.perf_counter()
            flood = subprocess.Popen(flood_cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE)
            loaded: list[float] = []
            while flood.poll() is None:
                loaded.append(await _health_ms(s, url))
            flood_s = time.perf_counter() - t0
            assert flood.stdout is not None
            flooded = json.loads(flood.stdout.read())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {
        "kind": args.kind, "requests": args.requests, **flooded, "flood_s": round(flood_s, 2),
        "health_idle": _stats(idle), "health_loaded": _stats(loaded),
    }  # fmt: skip


async def _flood(args: argparse.Namespace) -> None:
    """The oversized requests, all at once; prints their body size and statuses (JSON)."""
    size = int(args.prompt_mb * 1_000_000)
    prompt: str | list[int] = "a" * size
    if args.kind == "ids":
        prompt = [100] * (size // 4)  # "100," per id
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": 1},
                      separators=(",", ":")).encode()  # fmt: skip
    url = f"http://127.0.0.1:{args.port}/v1/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

        async def one() -> int:
            hdrs = {"Content-Type": "application/json"}
            async with s.post(url, data=body, headers=hdrs) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(one() for _ in range(args.requests)))
    print(json.dumps({"prompt_mb": round(len(body) / 1e6, 2), "statuses": sorted(set(statuses))}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", default="driver", choices=["driver", "edge", "flood"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--requests", type=int, default=60)
    p.add_argument("--prompt-mb", type=float, default=3.9)
    p.add_argument("--idle", type=int, default=50)
    p.add_argument("--kind", default="text", choices=["text", "ids"])
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.role == "edge":
        _edge(args.port)
        return
    if args.role == "flood":
        asyncio.run(_flood(args))
        return
    out = asyncio.run(drive(args))
    if args.json:
        print(json.dumps(out))
        return
    print(f"{out['requests']} x {out['prompt_mb']} MB {out['kind']} prompts, answered "
          f"{out['statuses']} "
          f"in {out['flood_s']} s")  # fmt: skip
    for name in ("health_idle", "health_loaded"):
        st = out[name]
        print(f"{name:14s} p50 {st['p50_ms']:8.2f} ms  p99 {st['p99_ms']:8.2f} ms  "
              f"max {st['max_ms']:8.2f} ms  ({st['n']} asked)")  # fmt: skip


if __name__ == "__main__":
    main()
