"""The end-to-end comparison: one three-region cluster, every routing policy, a few rates.

Owns the experiment plan of ``make demo``: start a ``LocalCluster`` (broker, maintenance units,
14 emulated SGLang workers with sidecars, three edges), then for each workload, rate and policy:
switch every edge to the policy, flush every worker's cache (cold start for each run: no policy
inherits another's caches), wait until the index is empty again, replay the same requests
(same seed per workload and rate), and summarise. Afterwards it checks every edge's view against
the maintenance state and counts events in vs. registrations applied. Must not define metrics
(``e2e.report``) or start processes itself (``e2e.cluster``).

Defaults and where they come from: the paper's testbed (``paper-testbed-14x3``: 8/2/4 RTX 5090
workers in US/EU/Asia, β = 0.085 ms/token, one-way WAN 160/126/149 ms); request origins in
proportion to each region's workers (the simulator's default, ``sim.experiment.origin_weights``:
demand follows capacity); rates in the range of the paper's Fig. 11 (4–40 req/s; 16 req/s is
its headline point); outputs capped at 128 tokens so a run drains within seconds (decode does
not enter TTFT); time scale 1 (real time). Faster scales fit more requests into the same wall
time but two cores then become the bottleneck: at scale 0.5 and 30 model req/s (60 wall req/s
through 34 processes) every policy collapsed for lack of CPU, not of GPU time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from e2e import report
from e2e.loadgen import LoadGenerator
from edge.policies import POLICIES
from kvcompass.cli.data import MOONCAKE_TRACE
from kvcompass.cli.deployments import load_deployment
from sim.workloads.workload import Workload

DEFAULT_TRACE = MOONCAKE_TRACE


@dataclass(frozen=True, slots=True)
class DemoPlan:
    deployment: str = "paper-testbed-14x3"
    policies: tuple[str, ...] = POLICIES
    mixed_rates: tuple[float, ...] = (8.0, 16.0)
    trace_rates: tuple[float, ...] = (3.0,)
    trace: Path | None = DEFAULT_TRACE
    trace_block_size: int = 512
    duration_s: float = 15.0
    """Model seconds of arrivals per run (requests = rate × duration)."""
    time_scale: float = 1.0
    max_output_tokens: int = 128
    drain_timeout_s: float = 600.0
    """How long a run's leftovers may keep the workers busy before the next run."""
    origins: str = "workers"
    seed: int = 1
    out_dir: Path = Path("demo-out")
    extra: dict[str, Any] = field(default_factory=dict)


def workloads(plan: DemoPlan) -> list[tuple[str, float, Workload]]:
    """(name, rate, workload) for every run, generated once per (workload, rate)."""
    from sim.experiment import load_trace_workload, make_workload

    dep = load_deployment(plan.deployment)
    out: list[tuple[str, float, Workload]] = []
    for rate in plan.mixed_rates:
        n = max(int(rate * plan.duration_s), 1)
        wl = make_workload("mixed", n, rate, dep, plan.seed, plan.origins)
        out.append(("mixed", rate, wl))
    if plan.trace is not None and plan.trace.exists():
        for rate in plan.trace_rates:
            n = max(int(rate * plan.duration_s), 1)
            wl = load_trace_workload(plan.trace, "mooncake", plan.trace_block_size, dep, n,
                                     plan.seed, rate, plan.origins)  # fmt: skip
            out.append(("mooncake", rate, wl))
    return out


def run_demo(
    plan: DemoPlan,
    cluster_factory: Callable[[], Any],
    console: Console,
    rows: list[dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every (workload, rate, policy); return the result rows and the end-of-run checks.

    Rows are appended to ``rows`` as runs finish, so a caller keeps them if a later run fails.
    """
    dep = load_deployment(plan.deployment)
    worker_region = np.asarray(dep.worker_region, dtype=np.int64)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    runs = workloads(plan)
    rows = [] if rows is None else rows
    checks: dict[str, Any] = {}
    region_names = [r.name for r in dep.regions]
    with cluster_factory() as cluster:
        urls = [cluster.edge_urls[name] for name in region_names]
        total = sum(len(wl) for _, _, wl in runs) * len(plan.policies)
        columns = (
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(),
        )  # fmt: skip
        with Progress(*columns, console=console) as progress:
            overall = progress.add_task("all runs", total=total)
            for name, rate, wl in runs:
                for policy in plan.policies:
                    label = f"{name} @ {rate:g} req/s, {policy}"
                    task = progress.add_task(label, total=len(wl))
                    cluster.set_policy(policy)
                    # A hot-spotted policy leaves abandoned requests queued in its workers (the
                    # client timed out); they drain before the next run starts cold.
                    cluster.flush_caches(timeout_s=plan.drain_timeout_s)
                    gen = LoadGenerator(
                        wl, urls, time_scale=plan.time_scale,
                        max_output_tokens=plan.max_output_tokens,
                        run_id=f"{name}-{rate:g}-{policy}-{int(time.time())}",
                    )  # fmt: skip
                    done_before = progress.tasks[overall].completed

                    def tick(k: int, task: Any = task, base: float = done_before) -> None:
                        progress.update(task, completed=k)
                        progress.update(overall, completed=base + k)

                    res = asyncio.run(gen.run(tick))
                    row: dict[str, Any] = {"workload": name, "rate": rate, "scheme": policy,
                           **report.summarise(res, worker_region)}  # fmt: skip
                    if res.errors:
                        row["errors"] = list(res.errors)
                    rows.append(row)
                    progress.remove_task(task)
                    progress.console.print(
                        f"  {label}: TTFT P99 {row.get('ttft_p99_ms', float('nan')):.0f} ms, "
                        f"{int(row['completed'])}/{int(row['requests'])} completed"
                    )
        cluster.wait_quiescent(60.0)
        checks["views"] = _as_dict(cluster.check_views())
        checks["events"] = _as_dict(cluster.count_events())
    return rows, checks


def _as_dict(value: Any) -> Any:
    if hasattr(value, "as_dict"):
        return value.as_dict()
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(value)
    return value
