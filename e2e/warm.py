"""``python -m e2e.warm``: compile every numba kernel the demo's processes run, once, into numba's
on-disk cache (every kernel is ``cache=True``: ``kvcompass/ludo/jit.py``, the sim kernels).

Why: a fresh clone has no cache; the first ``make demo`` then had its two maintenance units and
three edges compile the same kernels at once, which on a busy 2-core machine outlasted a fixed
start-up timeout (issue 36). The Makefile runs this once after installing and again whenever
a Python file under ``kvcompass/``, ``pipeline/``, ``edge/`` or ``sim/`` changed (its
``$(VENV)/.warm`` stamp); afterwards each process only loads the cached machine code.

What it drives are the processes' own warm-up paths, so it compiles exactly what they would: a
pipeline worker's (``PipelineShell``'s constructor runs one recover/apply/remove round through a
maintenance unit), an edge's (``edge.main.warm_up``: one decision, every scheme's ordering, the
booking rehearsals), and the launcher's workload generators (Mixed, burst, the Mooncake trace).
No broker, no network, no files but numba's cache. Prints what each took.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from wire.config import PipelineConfig
from wire.deployments import load_deployment
from wire.producer import MemoryProducer

DEPLOYMENT = "paper-testbed-14x3"
"""The demo's deployment (``e2e.spec.ClusterSpec``): kernels are typed by their arguments'
types, not by sizes, so one deployment warms every one."""


def warm_pipeline() -> None:
    from pipeline.delivery import Delivery
    from pipeline.shell import PipelineShell, WorkerSettings

    dep = load_deployment(DEPLOYMENT)
    delivery = Delivery(lambda _on_delivery: MemoryProducer())
    try:
        PipelineShell(WorkerSettings(PipelineConfig(n_shards=4), dep), delivery)
    finally:
        delivery.close(1.0)


def warm_edge() -> None:
    from edge.app import assemble
    from edge.config import EdgeConfig
    from edge.main import warm_up

    dep = load_deployment(DEPLOYMENT)
    warm_up(assemble(EdgeConfig(region=dep.regions[0].name), dep))


def warm_workloads() -> None:
    from e2e.spec import DemoPlan
    from sim.experiment import load_trace_workload, make_workload

    plan = DemoPlan()
    dep = load_deployment(plan.deployment)
    make_workload("mixed", 64, 10.0, dep, plan.seed, "uniform", plan.tenants)
    make_workload("burst", 64, 10.0, dep, plan.seed, "uniform")
    if plan.trace is not None and plan.trace.exists():
        load_trace_workload(plan.trace, "mooncake", plan.trace_block_size, dep, 64, plan.seed,
                            10.0, "uniform")  # fmt: skip


STEPS: dict[str, Callable[[], None]] = {
    "maintenance unit": warm_pipeline,
    "edge": warm_edge,
    "workloads": warm_workloads,
}


def main() -> int:
    t0 = time.perf_counter()
    for what, step in STEPS.items():
        t = time.perf_counter()
        step()
        print(f"warm: {what} kernels ready in {time.perf_counter() - t:.1f} s", flush=True)
    print(f"warm: numba cache ready in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
