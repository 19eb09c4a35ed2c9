"""Simulator speed: simulated requests per wall-second, per scheme, on one core.

Prints a table (``--json`` for machines). The request table (prefix keys, hashed once per
workload and shared by every scheme) is timed separately from the replay; a small warm-up run
compiles the numba kernels first so compile time is not counted. Each replay also reports its
CPU time (``time.process_time``): on a shared machine the wall clock counts the time other jobs
held the core, so "sim req per CPU-second" is the figure that compares runs.

    .venv/bin/python bench/sim_speed.py --deployment paper-64x8 --requests 50000 --rate 3000
"""

from __future__ import annotations

import argparse
import json
import time

from kvcompass.levels import Levels
from sim.config import SimConfig
from sim.engine.requests import Requests
from sim.experiment import DEFAULT_EVICTION, make_workload
from sim.runner import run_scheme
from wire.deployments import load_deployment


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", default="paper-64x8")
    ap.add_argument("--workload", default="mixed")
    ap.add_argument("--requests", type=int, default=50_000)
    ap.add_argument("--rate", type=float, default=3000.0)
    ap.add_argument("--schemes", default="kvcompass,oracle")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--chunk-tokens", type=int, default=0, help="cache chunk (0: block size)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    dep = load_deployment(args.deployment)
    levels = Levels.from_deployment(dep)
    cfg = SimConfig(
        seed=args.seed,
        eviction=DEFAULT_EVICTION.get(args.workload, "lru"),
        cache_chunk_tokens=args.chunk_tokens,
    )
    names = [s for s in args.schemes.split(",") if s]

    warm = make_workload(args.workload, 2000, args.rate, dep, args.seed)
    warm_req = Requests(warm, levels, cfg.chunk_tokens_for(warm.block_tokens))
    for name in names:
        run_scheme(name, warm_req, dep, levels, cfg)

    t0 = time.perf_counter()
    wl = make_workload(args.workload, args.requests, args.rate, dep, args.seed)
    t1 = time.perf_counter()
    req = Requests(wl, levels, cfg.chunk_tokens_for(wl.block_tokens))
    t2 = time.perf_counter()
    rows = []
    for name in names:
        c0 = time.process_time()
        r = run_scheme(name, req, dep, levels, cfg)
        cpu = time.process_time() - c0
        rows.append(
            {
                "scheme": name,
                "requests": args.requests,
                "wall_s": r.wall_s,
                "sim_requests_per_s": r.summary["sim_requests_per_s"],
                "cpu_s": cpu,
                "sim_requests_per_cpu_s": args.requests / max(cpu, 1e-9),
                "ttft_p99_ms": r.summary.get("ttft_p99_ms", float("nan")),
                "record_sha256": r.record.digest(),
            }
        )
    out = {
        "deployment": dep.name,
        "workload": args.workload,
        "rate": args.rate,
        "workload_s": t1 - t0,
        "keys_s": t2 - t1,
        "keys_requests_per_s": args.requests / max(t2 - t1, 1e-9),
        "runs": rows,
    }
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{dep.name}, {args.workload} @ {args.rate:g} req/s, {args.requests} requests")
    print(
        f"workload {t1 - t0:.2f} s, prefix keys {t2 - t1:.2f} s "
        f"({out['keys_requests_per_s']:,.0f} req/s)"
    )
    print(
        f"{'scheme':<28}{'wall s':>10}{'sim req/s':>14}{'CPU s':>10}{'req/CPU-s':>12}"
        f"{'P99 TTFT ms':>14}  record"
    )
    for row in rows:
        print(
            f"{row['scheme']:<28}{row['wall_s']:>10.2f}{row['sim_requests_per_s']:>14,.0f}"
            f"{row['cpu_s']:>10.2f}{row['sim_requests_per_cpu_s']:>12,.0f}"
            f"{row['ttft_p99_ms']:>14,.0f}  {row['record_sha256'][:12]}"
        )


if __name__ == "__main__":
    main()
