"""`kvcompass sim`: run the event-driven simulator and print, save and plot the results.

Parses flags into a ``SimConfig`` and a run plan (workload or trace, rates, schemes, one optional
robustness sweep of paper Table 4), calls ``sim.experiment``, shows a rich progress bar, prints a
table, writes the JSON (``--json``) and the PNGs (``--plots DIR``). Imports the simulator only
when the command runs. Must not hold simulation logic.

Examples::

    kvcompass sim --deployment paper-64x8 --workload mixed --rate 3000 --requests 200000 \
        --schemes all --seed 1 --json out.json
    kvcompass sim --deployment paper-64x8 --trace conv.jsonl --trace-block-size 512 --rate 3000 \
        --schemes kvcompass,oracle --json out.json
    kvcompass sim --workload mixed --rate 500 1000 2000 --schemes all --plots figs/
    kvcompass sim --workload mixed --rate 3000 --schemes kvcompass --sweep jitter 0 0.25 0.5 1
"""

from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sim",
        help="simulate KVCompass and the baselines on a deployment and workload",
        description="Event-driven simulation (paper §4, §5.3): schemes x rates x knobs.",
    )
    p.add_argument("--deployment", default="paper-64x8", help="built-in name or TOML path")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workload", default=None, help="mixed | wildchat | lmsys (default mixed)")
    src.add_argument("--trace", type=Path, default=None, help="trace file (e.g. Mooncake JSONL)")
    p.add_argument("--trace-format", default="mooncake", help="trace format (default mooncake)")
    p.add_argument("--trace-block-size", type=int, default=512, help="tokens per trace hash id")
    p.add_argument(
        "--rate",
        type=float,
        nargs="+",
        default=None,
        help="arrivals per second (default 3000; a trace: its own timing, rescaled if given)",
    )
    p.add_argument("--requests", type=int, default=20000, help="requests per run")
    p.add_argument(
        "--schemes",
        default="all",
        help="comma-separated scheme names and groups: all, ideal (the *_ideal references), "
        "ablations",
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--origins",
        default="workers",
        choices=("workers", "uniform", "population"),
        help="users per region: proportional to workers (default), uniform, or population",
    )
    p.add_argument(
        "--tenants",
        type=int,
        default=None,
        help="independent tenants of a generated workload (default: Mixed 50, paper §5.3; "
        "chat none); the e2e demo's testbed runs use 1",
    )
    p.add_argument("--eviction", default=None, help="lru | lfu | fifo (default: per workload)")
    p.add_argument("--wan-jitter", type=float, default=0.0, help="WAN jitter fraction (0..1)")
    p.add_argument("--index-loss", type=float, default=0.0, help="index patch batch loss (0..1)")
    p.add_argument("--index-delay-ms", type=float, default=0.0, help="extra index update delay")
    p.add_argument("--queue-loss", type=float, default=0.0, help="queue vector loss (0..1)")
    p.add_argument(
        "--cache-chunk-tokens",
        type=int,
        default=0,
        help="worker cache granularity in tokens (default 0: the workload's block size)",
    )
    p.add_argument(
        "--index-batch-ms",
        type=float,
        default=10.0,
        help="window of cache events a maintenance unit applies as one batch (default 10)",
    )
    p.add_argument(
        "--maintenance-region",
        default="",
        help="region whose cluster runs the maintenance units (default: the first, the home)",
    )
    p.add_argument(
        "--loads-poll-period-ms",
        type=float,
        default=100.0,
        help="period of every edge's local load poll (edge/loads.py; default 100)",
    )
    p.add_argument("--fp-bits", type=int, default=8, choices=(0, 8, 16))
    p.add_argument("--no-monotone", action="store_true", help="disable the monotonicity rule")
    p.add_argument(
        "--sweep",
        nargs="+",
        default=None,
        metavar=("KNOB", "VALUE"),
        help="Table 4 sweep: jitter|loss|delay followed by values (jitter/loss as fractions)",
    )
    p.add_argument("--json", type=Path, default=None, help="write results JSON here")
    p.add_argument(
        "--markdown", type=Path, default=None, help="write the result tables as Markdown here"
    )
    p.add_argument("--plots", type=Path, default=None, help="write PNG figures to this directory")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _schemes(spec: str) -> list[str]:
    from sim import schemes

    groups = {"all": schemes.ALL, "ablations": schemes.ABLATIONS, "ideal": schemes.IDEAL}
    names: list[str] = []
    for token in (t.strip() for t in spec.split(",")):
        for n in groups.get(token, (token,) if token else ()):
            schemes.get(n)  # validates the name
            if n not in names:
                names.append(n)
    return names


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from kvcompass.cli.deployments import load_deployment
    from sim import experiment
    from sim.config import SimConfig

    console = Console(stderr=True)
    dep = load_deployment(args.deployment)
    names = _schemes(args.schemes)
    wl_name = args.workload or ("trace" if args.trace else "mixed")
    eviction = args.eviction or experiment.DEFAULT_EVICTION.get(wl_name, "lru")
    base = SimConfig(
        seed=args.seed,
        eviction=eviction,
        wan_jitter_frac=args.wan_jitter,
        index_loss=args.index_loss,
        index_extra_delay_ms=args.index_delay_ms,
        queue_loss=args.queue_loss,
        index_batch_ms=args.index_batch_ms,
        maintenance_region=args.maintenance_region,
        loads_poll_period_ms=args.loads_poll_period_ms,
        cache_chunk_tokens=args.cache_chunk_tokens,
        fp_bits=args.fp_bits,
        monotone=not args.no_monotone,
    )
    knob: str | None = None
    values: list[float | None] = [None]
    if args.sweep:
        knob = args.sweep[0]
        if knob not in experiment.KNOBS or len(args.sweep) < 2:
            raise SystemExit(f"--sweep: expected one of {sorted(experiment.KNOBS)} and values")
        values = [float(v) for v in args.sweep[1:]]
    sets: list[experiment.RunSet] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        disable=args.quiet,
    ) as bar:
        rates: list[float | None] = list(args.rate or [None if args.trace else 3000.0])
        for asked in rates:
            if args.trace is not None:
                wl = experiment.load_trace_workload(
                    args.trace,
                    args.trace_format,
                    args.trace_block_size,
                    dep,
                    args.requests,
                    args.seed,
                    asked,
                    args.origins,
                )
                rate = asked or experiment.trace_rate_per_s(wl)
                for note in wl.notes:
                    console.print(f"{args.trace.name}: {note}")
            else:
                rate = asked or 3000.0
                wl = experiment.make_workload(
                    wl_name, args.requests, rate, dep, args.seed, args.origins, args.tenants
                )
            requests = None
            for value in values:
                cfg = base
                if knob is not None and value is not None:
                    cfg = experiment.with_knob(base, knob, value)
                progress = _Tasks(
                    bar, f"@ {rate:g}/s" + (f" {knob}={value:g}" if knob else ""), len(wl)
                )

                if requests is None:
                    from kvcompass.levels import Levels
                    from sim.engine.requests import Requests

                    requests = Requests(
                        wl,
                        Levels.from_deployment(dep),
                        cfg.chunk_tokens_for(wl.block_tokens),
                        progress=functools.partial(progress, "hash"),
                    )
                results = experiment.run_all(
                    wl, dep, names, cfg, progress=progress, requests=requests
                )
                sets.append(experiment.RunSet(rate, knob, value, results))
    doc = experiment.results_json(
        sets,
        deployment=dep.name,
        workload=wl_name,
        n_requests=args.requests,
        seed=args.seed,
        config=base,
    )
    _print_table(Console(width=200), sets)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2, default=float))
        console.print(f"wrote {args.json}")
    if args.markdown is not None:
        from sim import tables

        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(tables.results_markdown(doc))
        console.print(f"wrote {args.markdown}")
    if args.plots is not None:
        from sim import plots

        for path in plots.write_all(sets, args.plots):
            console.print(f"wrote {path}")
    return 0


class _Tasks:
    """One progress-bar task per scheme (and one for hashing) of a run set."""

    def __init__(self, bar: Any, suffix: str, total: int) -> None:
        self.bar, self.suffix, self.total = bar, suffix, total
        self.tasks: dict[str, Any] = {}

    def __call__(self, name: str, k: int) -> None:
        if name not in self.tasks:
            self.tasks[name] = self.bar.add_task(f"{name} {self.suffix}", total=self.total)
        self.bar.advance(self.tasks[name], k)


def _print_table(console: Any, sets: list[Any]) -> None:
    from sim import tables

    for s in sets:
        title = f"rate {s.rate:,g}/s" + (f", {s.knob}={s.value:g}" if s.knob else "")
        summaries = {name: r.summary for name, r in s.results.items()}
        console.print(tables.rich_table(tables.comparison(summaries), title))
        line = tables.verdict(summaries)
        if line:
            console.print(line)
        speeds = ", ".join(
            f"{name} {r.summary.get('sim_requests_per_s', 0.0):,.0f}"
            for name, r in s.results.items()
        )
        console.print(f"simulated requests per second: {speeds}", style="dim")
