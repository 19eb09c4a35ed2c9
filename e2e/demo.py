"""The end-to-end comparison: one three-region cluster, KVCompass and the local baselines, the
paper's testbed rates, two origin mixes.

Owns the experiment plan of ``make demo``: start a ``LocalCluster`` (broker, maintenance units,
14 emulated SGLang workers with sidecars, three edges), then for each workload, origin mix, rate
and scheme: make every worker's cache cold (flush, and wait until the index and every view are
empty: no scheme inherits another's caches), point the load at the scheme (an edge scheme via
``POST /admin/scheme``, or SGLang's own gateway, one ``sglang-router`` per region started fresh
for the run), replay the same requests (same seed per workload, origin mix and rate) and
summarise the requests that arrived after the warm-up. Afterwards it checks every edge's view
against the maintenance state and counts events in vs. registrations applied. Must not define
metrics (``kvcompass.metrics`` via ``e2e.report``) or start processes itself (``e2e.cluster``).

Where each default comes from (e2e/README "The regime that matters"):

- deployment ``paper-testbed-14x3``: the paper's testbed (§5.2), 8/2/4 RTX 5090 workers in
  US/EU/Asia, β = 0.085 ms/token, one-way WAN 160/126/149 ms;
- rates 8, 16, 32 req/s: inside the range of the paper's Fig. 11 (4–40 req/s; 16 is its headline
  point). With Mixed's mean prompt (~3.8K tokens, 0.33 s of prefill at β) 14 workers serve about
  43 req/s without reuse, so 32 req/s is 75% of the fleet: where load-aware routing matters;
- origin mixes ``workers`` (demand follows capacity: the simulator's default) and ``uniform``
  (a third of the traffic from each region: Europe's 2 workers then get 1/3 of the requests,
  1.7× what they can prefill at 32 req/s, so a region-local router queues while the others idle);
- a warm-up of ``warmup_s`` model seconds under the scheme itself, left out of the metrics, so
  the shared prefixes (tool sets, documents, few-shot prefixes) are cached where that scheme put
  them before anything is measured: the steady state the paper measures, not a cold start;
- outputs capped at ``max_output_tokens`` and streamed ``stream_interval`` tokens per chunk:
  decode does not enter TTFT, and every streamed chunk costs CPU on 2 cores;
- time scale 1 (real time): at 0.5 the 34 processes need more than two cores at 32 req/s and every
  scheme's tail measures the CPU, not the routing;
- one unmeasured priming run before the first measured one (``prime``): the first run after
  start-up otherwise paid the cluster's own cold start (the index tables grow through several
  epochs at every edge and maintenance unit, first connections, first records), a stall of
  1–2 s across every region that landed on whichever scheme ran first: a clean clone measured
  KVCompass's first run at a P99 of 2.1–3.8 s and the same run again right after at 0.55 s.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from e2e import report
from e2e.loadgen import LoadGenerator
from e2e.reuse import fetch_reuse
from e2e.spec import SGLANG_GATEWAY, DemoPlan
from sim.workloads.workload import Workload
from wire.deployments import load_deployment


@dataclass(frozen=True, slots=True)
class DemoRun:
    """One (workload, origin mix, rate): the requests every scheme gets."""

    workload: str
    origins: str
    rate: float
    requests: Workload
    schemes: tuple[str, ...] = ()
    """The schemes of this run (): the plan's ``schemes``)."""

    @property
    def label(self) -> str:
        return f"{self.workload}, origins {self.origins}, {self.rate:g} req/s"


def runs(plan: DemoPlan) -> list[DemoRun]:
    """Every (workload, origin mix, rate), each workload generated once."""
    from sim.experiment import load_trace_workload, make_workload

    dep = load_deployment(plan.deployment)
    span_s = plan.warmup_s + plan.measure_s
    out: list[DemoRun] = []
    for origins in plan.origin_mixes:
        for rate in plan.mixed_rates:
            n = max(int(rate * span_s), 1)
            wl = make_workload("mixed", n, rate, dep, plan.seed, origins, plan.tenants)
            out.append(DemoRun("mixed", origins, rate, wl))
        if plan.trace is not None and plan.trace.exists():
            for rate in plan.trace_rates:
                n = max(int(rate * span_s), 1)
                wl = load_trace_workload(plan.trace, "mooncake", plan.trace_block_size, dep, n,
                                         plan.seed, rate, origins)  # fmt: skip
                out.append(DemoRun("mooncake", origins, rate, wl))
    for rate in plan.burst_rates:  # every region at once: uniform origins
        n = max(int(rate * span_s), 1)
        wl = make_workload("burst", n, rate, dep, plan.seed, "uniform")
        out.append(DemoRun("burst", "uniform", rate, wl, plan.burst_schemes))
    return out


def prime(cluster: Any, run: DemoRun, plan: DemoPlan, progress: Progress) -> None:
    """Replay ``run`` once, unmeasured (edge scheme ``local_least_loaded``: no scheme is
    favoured, the flush before each measured run drops every cache it made), so every measured
    run meets a warm cluster (see the module docstring)."""
    task = progress.add_task(f"priming the cluster ({run.label}, not measured)",
                             total=len(run.requests))  # fmt: skip
    cluster.flush_caches(timeout_s=plan.drain_timeout_s)
    cluster.set_scheme("local_least_loaded")
    urls = [cluster.edge_urls[r.name] for r in load_deployment(plan.deployment).regions]
    gen = LoadGenerator(run.requests, urls, time_scale=plan.time_scale,
                        max_output_tokens=plan.max_output_tokens,
                        timeout_s=plan.request_timeout_s * plan.time_scale,
                        run_id=f"prime-{int(time.time())}")  # fmt: skip
    asyncio.run(gen.run(lambda k: progress.update(task, completed=k)))
    progress.remove_task(task)


def wall_estimate_s(plan: DemoPlan, per_run_overhead_s: float = 6.0) -> float:
    """Rough wall time of the runs (not the start-up): arrivals at the time scale plus a drain
    and flush per run (``per_run_overhead_s``, measured here; the gateway's start adds more)."""
    n = sum(len(r.schemes or plan.schemes) for r in runs(plan)) + int(plan.prime)
    return n * ((plan.warmup_s + plan.measure_s) * plan.time_scale + per_run_overhead_s)


def run_demo(
    plan: DemoPlan,
    cluster_factory: Callable[[], Any],
    console: Console,
    rows: list[dict[str, Any]] | None = None,
    skipped: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Run every (run, scheme); return the result rows and the end-of-run checks.

    Rows are appended to ``rows`` as runs finish, so a caller keeps them if a later run fails.
    A scheme that cannot run here (SGLang's gateway without its package) is left out with the
    reason in ``skipped`` (and printed), never silently.
    """
    from e2e.gateways import gateway_missing

    dep = load_deployment(plan.deployment)
    worker_region = np.asarray(dep.worker_region, dtype=np.int64)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    todo = runs(plan)
    rows = [] if rows is None else rows
    skipped = {} if skipped is None else skipped
    missing = gateway_missing()
    if missing and SGLANG_GATEWAY in {*plan.schemes, *(s for r in todo for s in r.schemes)}:
        skipped[SGLANG_GATEWAY] = missing
        console.print(f"[yellow]{SGLANG_GATEWAY} left out: {missing}[/]")

    def schemes_of(run: DemoRun) -> list[str]:
        return [s for s in run.schemes or plan.schemes if s not in skipped]

    checks: dict[str, Any] = {}
    region_names = [r.name for r in dep.regions]
    since_ms = plan.warmup_s * 1000.0
    with cluster_factory() as cluster:
        total = sum(len(r.requests) * len(schemes_of(r)) for r in todo)
        columns = (
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(),
        )  # fmt: skip
        with Progress(*columns, console=console) as progress:
            if plan.prime and todo:
                prime(cluster, todo[0], plan, progress)
            overall = progress.add_task("all runs", total=total)
            for run in todo:
                bodies = LoadGenerator(
                    run.requests, [""] * len(region_names),
                    max_output_tokens=plan.max_output_tokens,
                    run_id=f"{run.workload}-{run.origins}-{run.rate:g}-{int(time.time())}",
                ).payloads()  # encoded once: every scheme sends the same bytes  # fmt: skip
                for scheme in schemes_of(run):
                    label = f"{run.label}, {scheme}"
                    task = progress.add_task(label, total=len(run.requests))
                    # A hot-spotted scheme leaves abandoned requests queued in its workers (the
                    # client timed out); they drain before the next run starts cold.
                    t0 = time.monotonic()
                    if scheme == SGLANG_GATEWAY:
                        cluster.gateways.start()  # its start-up overlaps the flush
                    cluster.flush_caches(timeout_s=plan.drain_timeout_s)
                    t_flushed = time.monotonic()
                    if scheme == SGLANG_GATEWAY:
                        cluster.gateways.wait()
                        urls = [cluster.gateway_urls[name] for name in region_names]
                    else:
                        cluster.set_scheme(scheme)
                        urls = [cluster.edge_urls[name] for name in region_names]
                    gen = LoadGenerator(
                        run.requests, urls, time_scale=plan.time_scale,
                        max_output_tokens=plan.max_output_tokens,
                        timeout_s=plan.request_timeout_s * plan.time_scale, bodies=bodies,
                        run_id=f"{scheme}-{run.workload}-{run.origins}-{run.rate:g}-"
                               f"{int(time.time())}",
                    )  # fmt: skip
                    done_before = progress.tasks[overall].completed

                    def tick(k: int, task: Any = task, base: float = done_before) -> None:
                        progress.update(task, completed=k)
                        progress.update(overall, completed=base + k)

                    t_ready = time.monotonic()
                    try:
                        res = asyncio.run(gen.run(tick))
                    finally:
                        if scheme == SGLANG_GATEWAY:
                            cluster.gateways.stop()
                    row: dict[str, Any] = {
                        "workload": run.workload, "origins": run.origins, "rate": run.rate,
                        "scheme": scheme, "warmup_requests": int((res.arrival_ms < since_ms).sum()),
                        **report.summarise(res, worker_region, since_ms=since_ms),
                    }  # fmt: skip
                    row["wall_s"] = {"flush": round(t_flushed - t0, 1),
                                     "ready": round(t_ready - t_flushed, 1),
                                     "load": round(time.monotonic() - t_ready, 1)}  # fmt: skip
                    m = res.arrival_ms >= since_ms  # every measured request, for a post-mortem
                    row["per_request"] = {
                        "arrival_ms": res.arrival_ms[m].round(1).tolist(),
                        "origin": res.origin[m].tolist(), "worker": res.worker[m].tolist(),
                        "ttft_ms": res.ttft_ms[m].round(1).tolist(),
                        "prompt_tokens": res.prompt_tokens[m].tolist(),
                        "cached_tokens": res.cached_tokens[m].tolist(),
                    }  # fmt: skip
                    served = res.worker[(res.arrival_ms >= since_ms) & res.ok]
                    row["served_per_worker"] = np.bincount(
                        served[served >= 0], minlength=len(worker_region)
                    ).tolist()  # hot spots at a glance (SGLang's gateway names no worker: zeros)
                    if scheme != SGLANG_GATEWAY:  # the edges' split (the gateway has none)
                        measured = np.flatnonzero(res.arrival_ms >= since_ms)
                        row["reuse_tokens"] = asyncio.run(fetch_reuse(
                            urls, run.requests.origin_region[measured],
                            [f"{gen.run_id}-{i}" for i in measured.tolist()],
                        ))  # fmt: skip
                        row["reuse_tokens"]["prompt"] = int(run.requests.prompt_len[measured].sum())
                    if res.errors:
                        row["errors"] = list(res.errors)
                    rows.append(row)
                    progress.remove_task(task)
                    progress.console.print(f"  {label}: {report.run_line(row)}")
        # requests a client gave up on may still run (until the worker notices the client left)
        cluster.wait_workers_idle(plan.drain_timeout_s)
        cluster.wait_quiescent(120.0)
        views, events = cluster.check_views(), cluster.count_events()
        checks["views"] = views.as_dict()
        checks["events"] = events.as_dict()
        checks["lines"] = [views.line(), events.line()]
    return rows, checks
