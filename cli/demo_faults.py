"""``kvcompass demo-faults``: start a whole deployment as processes, run the fault scenarios.

Starts ``e2e.cluster.LocalCluster`` (broker, maintenance units, emulated workers + sidecars, one
edge per region), runs ``e2e.faults.run_scenarios`` under a background load with a rich progress
display, prints one row per scenario and exits 1 if any check failed. The launcher is imported
only when the command runs. Must not: hold launcher or scenario logic.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from cli import pipeline_flags

SCENARIO_NAMES = (
    "baseline",
    "maintenance-crash",
    "edge-restart",
    "broker-restart",
    "queue-vectors-drop",
    "index-ops-lost",
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo-faults",
        help="run a whole deployment as local processes and inject faults under load",
        description="Start broker, maintenance units, emulated workers with sidecars and one edge "
        "per region as processes; kill and restart pieces under load; check every edge's view "
        "against the truth and that no accepted event was lost.",
    )
    p.add_argument("--deployment", default="paper-testbed-14x3", help="name or TOML path")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="emulated worker time scale = edge WAN delay scale",
    )
    pipeline_flags.add_n_shards(p)
    p.add_argument("--n-maintenance", type=int, default=2)
    p.add_argument(
        "--bootstrap",
        default=None,
        help="use this broker (then broker-restart is skipped); default: start one",
    )
    p.add_argument("--topic-prefix", default=None, help="default: demo-<time>.")
    p.add_argument("--run-dir", type=Path, default=None, help="logs, views, broker (default: tmp)")
    p.add_argument(
        "--scenarios",
        default=",".join(SCENARIO_NAMES),
        help=f"comma-separated, in order, from {', '.join(SCENARIO_NAMES)}",
    )
    p.add_argument("--hold-s", type=float, default=12.0, help="how long a fault lasts")
    p.add_argument("--settle-s", type=float, default=5.0, help="load after each fault")
    p.add_argument("--clients", type=int, default=6, help="concurrent load clients")
    p.set_defaults(func=run)


def _sigterm(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds through LocalCluster.__exit__: every child is stopped


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    try:
        from e2e import report
        from e2e.cluster import ClusterSpec, LocalCluster
        from e2e.faults import BackgroundLoad, ScenarioResult, run_scenarios
    except ImportError as exc:
        print(f"error: the e2e package is not importable ({exc}); run from the repository root")
        return 2
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    console = report.console()  # a pipe or a file gets whole lines, not 80 columns
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="kvcompass-faults-"))
    prefix = args.topic_prefix if args.topic_prefix is not None else f"demo-{int(time.time())}."
    spec = ClusterSpec(
        deployment=args.deployment,
        time_scale=args.time_scale,
        n_shards=pipeline_flags.n_shards(args),
        n_maintenance=args.n_maintenance,
        bootstrap_servers=args.bootstrap,
        topic_prefix=prefix,
    )
    signal.signal(signal.SIGTERM, _sigterm)
    results: list[ScenarioResult] = []
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    )
    with progress:
        task = progress.add_task("starting the cluster", total=len(names) + 1)

        def status(msg: str) -> None:
            progress.update(task, description=msg)

        def done(res: ScenarioResult) -> None:
            progress.advance(task)
            mark = "ok" if res.ok else "FAILED"
            progress.console.print(f"{res.name}: {mark} ({res.load.served} served)")

        cluster = LocalCluster(spec, run_dir, on_status=status)
        try:
            with cluster:
                progress.advance(task)
                progress.console.print(
                    f"cluster of {cluster.n_workers} workers, {len(cluster.regions)} edges, "
                    f"{spec.n_maintenance} maintenance units up in {cluster.startup_s:.1f} s; "
                    f"logs in {cluster.logs}"
                )
                load = BackgroundLoad(cluster.edge_urls, clients=args.clients)
                results = run_scenarios(
                    cluster,
                    names,
                    hold_s=args.hold_s,
                    settle_s=args.settle_s,
                    load=load,
                    on_status=status,
                    on_result=done,
                )
                status("stopping the cluster")
        except KeyboardInterrupt:
            console.print("interrupted: every process was stopped")
            return 130
    report.print_table(console, _table(results, Table))
    failed = [r.name for r in results if not r.ok]
    console.print(f"run directory (logs, views, broker): {run_dir}")
    if failed:
        console.print(f"[red]failed: {', '.join(failed)}[/red]")
        return 1
    console.print(
        "[green]every scenario: served under the fault, views equal the truth, "
        "no accepted event lost, every engine's published cache in kv-events[/green]"
    )
    return 0


def _table(results: list[Any], table_cls: Any) -> Any:
    t = table_cls(title="fault scenarios")
    for col in (
        "scenario",
        "fault",
        "took s",
        "served",
        "refused",
        "failed",
        "error window s",
        "quiescent s",
        "view mismatches",
        "events lost",
        "engine ≠ kafka",
        "result",
    ):
        t.add_column(col, justify="left" if col in ("scenario", "fault", "result") else "right",
                     no_wrap=True)  # fmt: skip
    for r in results:
        views = (
            "—"
            if r.views is None
            else ", ".join(f"{reg} {m}/{c}" for reg, (c, m, _) in r.views.per_edge.items())
        )
        lost = "—" if r.events is None else f"{r.events.lost} of {r.events.with_ops}"
        eng = "—" if r.engines is None else f"{r.engines.differing} keys"
        verdict = "skipped" if r.skipped else ("ok" if r.ok else f"FAILED {r.error or ''}")
        t.add_row(
            r.name,
            r.fault,
            f"{r.fault_s:.1f}",
            str(r.load.served),
            str(r.load.refused),
            str(r.load.failed),
            f"{r.load.error_window_s:.1f}",
            f"{r.quiescent_s:.1f}",
            views,
            lost,
            eng,
            verdict,
        )
    return t
