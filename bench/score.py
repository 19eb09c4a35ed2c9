"""Router scoring: time ``Router.choose`` alone (validation + one njit call + Decision).

Usage::

    .venv/bin/python bench/score.py                  # table
    .venv/bin/python bench/score.py --json           # machine-readable rows
    .venv/bin/python bench/score.py --requests 50000

Deployments: the paper's testbed (14 workers), 64 and 128 workers (built-in deployments).
Inputs are index-shaped answers drawn once with a fixed seed: each request has 0–4 holders with
matches on a 16-token grid up to the prompt, VRAM or DRAM, over prompts of 256–8192 tokens;
queue estimates are random (0–50 ms, every region refreshed). Each call is timed on its own
with ``perf_counter_ns`` after a warm-up; P50/P99 over all calls. A second column times the
full per-request feedback loop the edge runs (``choose`` + ``on_forward`` + ``observe``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvcompass.deployment import builtin_deployment
from kvcompass.levels import Levels
from kvcompass.router import Router

DEPLOYMENTS = ("paper-testbed-14x3", "paper-64x8", "paper-128x16")


def _router(name: str, rng: np.random.Generator) -> Router:
    dep = builtin_deployment(name)
    router = Router.from_deployment(dep, Levels.from_deployment(dep), 0)
    router.set_local_queues(rng.uniform(0, 50, router.queue_view.local_workers.size), 0.0)
    for r in range(1, dep.n_regions):
        ids = dep.workers_of(r)
        router.on_broadcast(r, ids, rng.uniform(0, 50, ids.size), 0.0)
    return router


def _requests(
    n_workers: int, n: int, rng: np.random.Generator
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    out = []
    for _ in range(n):
        prompt = int(rng.integers(16, 513)) * 16
        matched = np.zeros(n_workers, np.int64)
        tiers = np.zeros(n_workers, np.uint8)
        holders = rng.choice(n_workers, size=int(rng.integers(0, 5)), replace=False)
        matched[holders] = rng.integers(1, prompt // 16 + 1, holders.size) * 16
        tiers[holders] = rng.integers(1, 3, holders.size)
        out.append((prompt, matched, tiers))
    return out


def _percentiles(ns: list[int]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.array(ns, dtype=np.float64) / 1e3, [50, 99])
    return float(p50), float(p99)


def run(n_requests: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in DEPLOYMENTS:
        rng = np.random.default_rng(20261201)
        router = _router(name, rng)
        reqs = _requests(router.n_workers, n_requests, rng)
        for prompt, matched, tiers in reqs[:200]:  # warm-up (compiled or cached kernel)
            router.choose(prompt, matched, tiers, 0.0)
        choose_ns = []
        for prompt, matched, tiers in reqs:
            t0 = time.perf_counter_ns()
            router.choose(prompt, matched, tiers, 0.0)
            choose_ns.append(time.perf_counter_ns() - t0)
        loop_ns = []
        router = _router(name, np.random.default_rng(20261201))
        for i, (prompt, matched, tiers) in enumerate(reqs):
            now = float(i)
            t0 = time.perf_counter_ns()
            d = router.choose(prompt, matched, tiers, now)
            router.on_forward(d, now)
            router.observe(i % 500, matched, d, now)
            loop_ns.append(time.perf_counter_ns() - t0)
            if i % 100 == 0:  # refreshes, untimed: keep pending work from growing without bound
                router.set_local_queues(np.zeros(router.queue_view.local_workers.size), now)
        c50, c99 = _percentiles(choose_ns)
        l50, l99 = _percentiles(loop_ns)
        rows.append(
            {
                "deployment": name,
                "workers": router.n_workers,
                "requests": n_requests,
                "choose_p50_us": round(c50, 2),
                "choose_p99_us": round(c99, 2),
                "loop_p50_us": round(l50, 2),
                "loop_p99_us": round(l99, 2),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args()
    rows = run(args.requests)
    if args.json:
        meta = {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "numba": numba.__version__,
            "machine": platform.machine(),
        }
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return
    print(
        f"{'deployment':<20} {'W':>4} {'choose P50':>11} {'P99':>8} {'loop P50':>9} {'P99':>8} µs"
    )
    for r in rows:
        print(
            f"{r['deployment']:<20} {r['workers']:>4} {r['choose_p50_us']:>11} "
            f"{r['choose_p99_us']:>8} {r['loop_p50_us']:>9} {r['loop_p99_us']:>8}"
        )


if __name__ == "__main__":
    main()
