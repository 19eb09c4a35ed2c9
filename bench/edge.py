"""Edge overhead and throughput: the edge process versus calling the worker directly.

Three processes on loopback: a worker, one edge (``edge.app``, the real handlers and the real
``EdgeDiscovery.decide`` over a populated index view), and this driver. The worker is a canned
SGLang/OpenAI responder by default (``--worker fake``: no per-request work, so what is measured is
the edge), or the emulated SGLang worker (``--worker emulated``, time scale 0).

1. Overhead: open-loop arrivals at ``--rate`` req/s (Poisson), ``--requests`` each, direct to the
   worker and through the edge in alternating rounds (``--rounds``, so both see the same background
   load); latency = send to last byte. ``overhead_p50_ms`` /
   ``overhead_p99_ms`` = percentile(through edge) − percentile(direct).
2. Max throughput: ``--concurrency`` closed-loop clients send streaming ``/generate`` requests
   through the edge for ``--seconds``; ``max_rps`` = completed requests / second.

Also printed: the edge process's CPU time per request (``/proc/<pid>/stat``) and
``cpu_bound_rps`` (streamed requests per CPU-second of the edge: what one dedicated core would
sustain). The edge is pinned to one CPU (``--edge-cpu``; -1: not pinned), worker and driver to
the other(s) when the machine has more than one. The index holds ``--entries`` entries (random
keys plus the bench prompts registered on a few workers, so lookups hit).

    python bench/edge.py [--rate 500] [--requests 3000] [--prompt-tokens 512] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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
    sys.path[0] = str(ROOT)  # this file is bench/edge.py: "import edge" must find the package
DEPLOYMENT = "paper-testbed-14x3"
MODEL = "bench-model"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pin(cpus: set[int]) -> None:
    if -1 in cpus:  # no pinning: let the scheduler place the process
        return
    avail = os.sched_getaffinity(0)
    use = cpus & avail
    if use:
        os.sched_setaffinity(0, use)


# -- roles run in child processes ------------------------------------------------------------
def _fake_worker(port: int) -> None:
    from aiohttp import web

    body = json.dumps(
        {
            "text": "ab",
            "output_ids": [97, 98],
            "meta_info": {"id": "x", "prompt_tokens": 1, "cached_tokens": 0},
        }
    ).encode()
    chunks = [
        b'data: {"text":"a","meta_info":{"cached_tokens":0}}\n\n',
        b'data: {"text":"ab","meta_info":{"cached_tokens":0}}\n\n',
        b"data: [DONE]\n\n",
    ]

    async def generate(request: web.Request) -> web.StreamResponse:
        req = await request.json()
        if req.get("stream"):
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for c in chunks:
                await resp.write(c)
            await resp.write_eof()
            return resp
        return web.Response(body=body, content_type="application/json")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/generate", generate)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


def _emulated_worker(port: int) -> None:
    from workers.emulated.costs import EmulatedCosts
    from workers.emulated.worker import EmulatedConfig, EmulatedWorker

    cfg = EmulatedConfig(model=MODEL, port=port, events_endpoint="tcp://127.0.0.1:*",
                         replay_endpoint=None, costs=EmulatedCosts(time_scale=0.0))  # fmt: skip
    asyncio.run(EmulatedWorker(cfg).serve_forever())


def _edge(port: int, worker_url: str, entries: int, prompt_tokens: int, seed: int) -> None:
    from aiohttp import web

    from edge.app import assemble, build_app
    from edge.config import EdgeConfig
    from kvcompass.index import DiscoveryIndex
    from kvcompass.layout import TableLayout
    from kvcompass.levels import Levels
    from wire.deployments import load_deployment

    dep = load_deployment(DEPLOYMENT)
    workers = {str(w): worker_url for w in range(dep.n_workers)}
    cfg = EdgeConfig.from_mapping({"region": "us", "model": MODEL, "port": port,
                                   "loads_poll_period_ms": 0.0}, workers)  # fmt: skip
    edge = assemble(cfg, dep)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    n_shards = edge.view.n_shards
    per_view = entries // (layout.n_tables * n_shards) + 1024
    index = DiscoveryIndex(layout, n_shards=n_shards, seed=seed, initial_capacity=per_view)
    rng = np.random.default_rng(seed)
    levels = Levels.from_deployment(dep)
    hasher = edge.service.discovery.hasher
    for p in _prompts(prompt_tokens, seed)[:64]:  # the bench prompts: held by us workers
        w = int(rng.integers(0, 8))
        reg = levels.registration_lengths(0)
        index.register(w, hasher.keys_at(np.asarray(p, np.int32), reg[reg <= len(p)]))
    while index.entries() < entries:
        w = int(rng.integers(0, dep.n_workers))
        index.register(w, rng.integers(0, 2**63, size=min(100_000, entries), dtype=np.uint64))
    edge.view.apply_all(index.full_images())
    del index
    gc.collect()
    gc.freeze()  # as edge.main does after bootstrap
    web.run_app(build_app(edge), host="127.0.0.1", port=port, access_log=None, print=None)


# -- driver ----------------------------------------------------------------------------------
def _prompts(n_tokens: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=n_tokens).tolist() for _ in range(128)]


async def _wait_up(url: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):  # bounded: ~60 s (numba compile on first edge start)
            if proc.poll() is not None:
                raise RuntimeError(f"{url} exited with {proc.returncode}")
            try:
                async with s.post(url + "/generate", json={"input_ids": [1, 2, 3]}) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def _open_loop(url: str, bodies: list[bytes], rate: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=len(bodies))
    lat = np.full(len(bodies), np.nan)
    conn = aiohttp.TCPConnector(limit=0)
    hdrs = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=conn) as s:

        async def one(i: int) -> None:
            t0 = time.perf_counter()
            async with s.post(url + "/generate", data=bodies[i], headers=hdrs) as r:
                await r.read()
                if r.status == 200:
                    lat[i] = (time.perf_counter() - t0) * 1e3

        tasks = []
        start = time.perf_counter()
        due = start
        for i in range(len(bodies)):
            due += gaps[i]
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
    return lat


async def _closed_loop(
    url: str, bodies: list[bytes], conc: int, seconds: float
) -> tuple[float, int]:
    done = 0
    stop_at = time.perf_counter() + seconds
    hdrs = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:

        async def client(k: int) -> None:
            nonlocal done
            i = k
            while time.perf_counter() < stop_at:
                async with s.post(url + "/generate", data=bodies[i % len(bodies)],
                                  headers=hdrs) as r:  # fmt: skip
                    await r.read()
                    done += r.status == 200
                i += conc

        t0 = time.perf_counter()
        await asyncio.gather(*(client(k) for k in range(conc)))
        return done / (time.perf_counter() - t0), done


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (``/proc/<pid>/stat`` fields 14, 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spawn(role: str, *args: Any) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, __file__, "--role", role, *map(str, args)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)


async def drive(args: argparse.Namespace) -> dict[str, Any]:
    wport, eport = _free_port(), _free_port()
    worker = _spawn(f"worker-{args.worker}", wport, args.worker_cpu)
    edge = _spawn("edge", eport, f"http://127.0.0.1:{wport}", args.entries, args.prompt_tokens,
                  args.seed, args.edge_cpu)  # fmt: skip
    _pin({args.worker_cpu})
    try:
        wurl, eurl = f"http://127.0.0.1:{wport}", f"http://127.0.0.1:{eport}"
        await _wait_up(wurl, worker)
        await _wait_up(eurl, edge)
        prompts = _prompts(args.prompt_tokens, args.seed)
        plain = [json.dumps({"input_ids": p, "sampling_params": {"max_new_tokens": 2}}).encode()
                 for p in prompts]  # fmt: skip
        stream = [json.dumps({"input_ids": p, "stream": True,
                              "sampling_params": {"max_new_tokens": 2}}).encode()
                  for p in prompts]  # fmt: skip
        bodies = [plain[i % len(plain)] for i in range(args.requests)]
        for url in (wurl, eurl):  # warm up pools, caches, numba dispatch
            await _open_loop(url, bodies[:200], args.rate, args.seed)
        # Alternate direct and edge rounds so both see the same background noise.
        d_parts, e_parts, cpu_open = [], [], 0.0
        per = max(len(bodies) // args.rounds, 1)
        for k in range(args.rounds):
            part = bodies[k * per : (k + 1) * per]
            d_parts.append(await _open_loop(wurl, part, args.rate, args.seed + k))
            cpu0 = _cpu_s(edge.pid)
            e_parts.append(await _open_loop(eurl, part, args.rate, args.seed + k))
            cpu_open += _cpu_s(edge.pid) - cpu0
        direct, via = np.concatenate(d_parts), np.concatenate(e_parts)
        cpu0 = _cpu_s(edge.pid)
        rps, n_stream = await _closed_loop(eurl, stream, args.concurrency, args.seconds)
        cpu_closed = _cpu_s(edge.pid) - cpu0
        direct_rps, _ = await _closed_loop(wurl, stream, args.concurrency, args.seconds)
    finally:
        for p in (edge, worker):
            p.terminate()
            p.wait(10)
    d50, d99 = np.nanpercentile(direct, [50, 99])
    e50, e99 = np.nanpercentile(via, [50, 99])
    return {
        "worker": args.worker, "rate_rps": args.rate, "requests": args.requests,
        "prompt_tokens": args.prompt_tokens, "entries": args.entries,
        "direct_p50_ms": round(float(d50), 3), "direct_p99_ms": round(float(d99), 3),
        "edge_p50_ms": round(float(e50), 3), "edge_p99_ms": round(float(e99), 3),
        "overhead_p50_ms": round(float(e50 - d50), 3),
        "overhead_p99_ms": round(float(e99 - d99), 3),
        "failed_direct": int(np.isnan(direct).sum()), "failed_edge": int(np.isnan(via).sum()),
        "max_rps": round(rps, 1), "direct_max_rps": round(direct_rps, 1),
        "concurrency": args.concurrency,
        "edge_cpu_us_per_request": round(cpu_open / max(via.size, 1) * 1e6, 1),
        "edge_cpu_us_per_streamed_request": round(cpu_closed / max(n_stream, 1) * 1e6, 1),
        "cpu_bound_rps": round(n_stream / cpu_closed, 1) if cpu_closed > 0 else None,
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=("fake", "emulated"), default="fake")
    ap.add_argument("--rate", type=float, default=500.0, help="open-loop arrivals per second")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--entries", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=6, help="alternating direct/edge rounds")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--edge-cpu", type=int, default=0, help="CPU of the edge (-1: not pinned)")
    ap.add_argument(
        "--worker-cpu", type=int, default=1, help="CPU of worker + driver (-1: not pinned)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    r = args.rest
    if args.role.startswith("worker-"):
        _pin({int(r[1])})
        (_fake_worker if args.role == "worker-fake" else _emulated_worker)(int(r[0]))
        return
    if args.role == "edge":
        _pin({int(r[5])})
        _edge(int(r[0]), r[1], int(r[2]), int(r[3]), int(r[4]))
        return
    res = asyncio.run(drive(args))
    if args.json:
        print(json.dumps(res))
    else:
        for k, v in res.items():
            print(f"{k:>18}: {v}")


if __name__ == "__main__":
    main()
