"""The edge's decision lifecycle in process: what the decider costs per request, without HTTP.

One edge (``edge.app.assemble``, no broker) of a built-in deployment runs, per request, what
its handlers call: ``EdgeService.decide`` → ``dispatch`` → ``on_accepted`` → ``on_first_token``
→ ``on_done`` (local workers idle, an empty view: the score, the overlay, the booking and the
ledger all run). Prints µs per request (wall and CPU), ``--profile`` adds cProfile's top
functions; ``--json`` for machines.

    .venv/bin/python -m bench.edge_decider --deployment paper-testbed-14x3 --requests 3000

(as a module: run as a script, ``bench/edge.py`` would shadow the ``edge`` package)
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time

import numpy as np

from edge.app import assemble
from edge.config import EdgeConfig
from edge.service import EdgeService
from wire.deployments import load_deployment


def lifecycle(svc: EdgeService, prompts: list[np.ndarray], n: int) -> None:
    """``n`` requests through the service, as the handlers drive it."""
    for i in range(n):
        t = prompts[i % len(prompts)]
        ex = svc.decide(f"r{i}", t)
        w = ex.plan.worker
        svc.dispatch(ex, w, t)
        svc.on_accepted(f"r{i}", ex, w)
        svc.on_first_token(ex, w, 0)
        svc.on_done(ex)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deployment", default="paper-testbed-14x3")
    ap.add_argument("--region", default="us")
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    dep = load_deployment(args.deployment)
    cfg = EdgeConfig.from_mapping({"region": args.region, "model": "m",
                                   "loads_poll_period_ms": 0.0})  # fmt: skip
    svc = assemble(cfg, dep).service
    rng = np.random.default_rng(1)
    prompts = [rng.integers(0, 256, args.prompt_tokens).astype(np.int32) for _ in range(200)]
    lifecycle(svc, prompts, 300)  # numba compiles, caches warm
    w0, c0 = time.perf_counter(), time.process_time()
    lifecycle(svc, prompts, args.requests)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    out = {
        "deployment": args.deployment, "workers": dep.n_workers, "requests": args.requests,
        "prompt_tokens": args.prompt_tokens,
        "wall_us_per_request": round(wall / args.requests * 1e6, 1),
        "cpu_us_per_request": round(cpu / args.requests * 1e6, 1),
    }  # fmt: skip
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>22}: {v}")
    if args.profile:
        prof = cProfile.Profile()
        prof.runcall(lifecycle, svc, prompts, args.requests)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
        print(text.getvalue())


if __name__ == "__main__":
    main()
