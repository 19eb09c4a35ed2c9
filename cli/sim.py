"""`kvcompass sim`: run the event-driven simulator and print, save and plot the results.

Parses flags into a ``SimConfig`` and a run plan (workload or trace, rates, schemes, one optional
robustness sweep of paper Table 4, seeds), runs its cells on every core (``sim.cells``), shows a
rich progress bar over the cells with an ETA, prints a table (over several seeds: mean, min–max
and a verdict per ratio, ``sim.spread``), writes the JSON (``--json``) and the PNGs (``--plots
DIR``). Imports the simulator only when the command runs. Must not hold simulation logic.

Examples::

    kvcompass sim --deployment paper-64x8 --workload mixed --rate 3000 --requests 200000 \
        --schemes all --seed 1 --json out.json
    kvcompass sim --deployment paper-64x8 --trace conv.jsonl --trace-block-size 512 --rate 3000 \
        --schemes kvcompass,oracle --json out.json
    kvcompass sim --workload mixed --rate 500 1000 2000 --schemes all --plots figs/
    kvcompass sim --workload mixed --rate 3000 --schemes kvcompass --sweep jitter 0 0.25 0.5 1
    kvcompass sim --workload mixed --rate 230 --requests 4000 --schemes kvcompass,oracle,dynamo \
        --seeds 3 --jobs 2 --json out.json
"""

from __future__ import annotations

import argparse
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
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="several seeds (e.g. 1 2 3), or one count N for seeds 1..N: tables and JSON give "
        "each figure's mean (min–max) and a verdict per ratio; overrides --seed",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=0,
        help="processes running the (rate, seed, knob, scheme) cells (default 0: every core); "
        "results are identical whatever the count",
    )
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


def seeds_of(values: list[int] | None, seed: int) -> list[int]:
    """``--seeds``: several values are the seeds; one value N means seeds 1..N; none: ``--seed``."""
    if not values:
        return [seed]
    if len(values) == 1:
        if values[0] < 1:
            raise SystemExit(f"--seeds: expected a count >= 1 or a list of seeds, got {values[0]}")
        return list(range(1, values[0] + 1))
    if len(set(values)) != len(values):
        raise SystemExit(f"--seeds: expected distinct seeds, got {values}")
    return list(values)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from sim import cells as sim_cells
    from sim import experiment
    from sim.config import SimConfig
    from wire.deployments import load_deployment

    console = Console(stderr=True)
    dep = load_deployment(args.deployment)
    names = _schemes(args.schemes)
    seeds = seeds_of(args.seeds, args.seed)
    jobs = args.jobs or sim_cells.default_jobs()
    if jobs < 1:
        raise SystemExit(f"--jobs: expected >= 1, got {jobs}")
    wl_name = args.workload or ("trace" if args.trace else "mixed")
    eviction = args.eviction or experiment.DEFAULT_EVICTION.get(wl_name, "lru")
    base = SimConfig(
        seed=seeds[0],
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
    rates: list[float | None] = list(args.rate or [None if args.trace else 3000.0])
    plan: list[sim_cells.Cell] = []
    for seed in seeds:  # cells of one source are adjacent: each process hashes it once
        for asked in rates:
            source = sim_cells.Source(
                workload=wl_name,
                n_requests=args.requests,
                rate=asked,
                seed=seed,
                origins=args.origins,
                tenants=args.tenants,
                trace=args.trace,
                trace_format=args.trace_format,
                trace_block_size=args.trace_block_size,
            )
            for value in values:
                cfg = replace(base, seed=seed)
                if knob is not None and value is not None:
                    cfg = experiment.with_knob(cfg, knob, value)
                plan += [sim_cells.Cell(source, dep, n, cfg, knob, value) for n in names]
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} cells"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=args.quiet,
    ) as bar:
        task = bar.add_task(
            f"{len(plan)} runs on {min(jobs, len(plan))} process(es)", total=len(plan)
        )

        def done(i: int, o: sim_cells.Outcome) -> None:
            bar.update(task, advance=1, description=f"{o.cell.scheme} seed {o.cell.config.seed}")

        outcomes = sim_cells.run_cells(plan, jobs, done)
    by_seed = _run_sets(outcomes)
    if args.trace is not None:
        for note in dict.fromkeys(n for o in outcomes for n in o.notes):
            console.print(f"{args.trace.name}: {note}")
    doc = experiment.results_json_seeds(
        by_seed,
        deployment=dep.name,
        workload=wl_name,
        n_requests=args.requests,
        config=base,
    )
    _print_table(Console(width=240 if len(seeds) == 1 else 330), by_seed)
    first = by_seed[seeds[0]]
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

        for path in plots.write_all(first, args.plots):  # the first seed's runs
            console.print(f"wrote {path}")
    return 0


def _run_sets(outcomes: list[Any]) -> dict[int, list[Any]]:
    """Outcomes (in plan order) grouped per seed into run sets, one per (rate, knob value)."""
    from sim.experiment import RunSet

    by_seed: dict[int, dict[tuple[Any, ...], Any]] = {}
    for o in outcomes:
        c = o.cell
        sets = by_seed.setdefault(c.config.seed, {})
        key = (c.source.rate, c.knob, c.value)
        if key not in sets:
            sets[key] = RunSet(o.rate, c.knob, c.value, {})
        sets[key].results[c.scheme] = o.result
    return {seed: list(sets.values()) for seed, sets in by_seed.items()}


def _print_table(console: Any, by_seed: dict[int, list[Any]]) -> None:
    from sim import tables

    seeds = list(by_seed)
    for k, s in enumerate(by_seed[seeds[0]]):
        title = f"rate {s.rate:,g}/s" + (f", {s.knob}={s.value:g}" if s.knob else "")
        if len(seeds) > 1:
            title += f", seeds {' '.join(map(str, seeds))}: mean (min–max)"
        per_seed = [{n: r.summary for n, r in by_seed[x][k].results.items()} for x in seeds]
        console.print(tables.rich_table(tables.comparison_seeds(per_seed), title))
        line = tables.verdict_seeds(per_seed)
        if line:
            console.print(line)
        speeds = ", ".join(
            f"{name} {r.summary.get('sim_requests_per_s', 0.0):,.0f}"
            for name, r in s.results.items()
        )
        console.print(f"simulated requests per second (seed {seeds[0]}): {speeds}", style="dim")
