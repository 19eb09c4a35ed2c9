"""`kvcompass demo`: the three-region end-to-end comparison.

``demo`` is the project's main job as a user first meets it (``make demo``): it starts a local
Kafka broker, the Faust maintenance units, 14 emulated SGLang workers with their sidecars and
three edges (US, EU, Asia, the paper's testbed), replays a Mixed workload and the Mooncake trace
at a few rates under every routing scheme the edge supports, and prints the comparison
(``e2e.demo``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from cli import pipeline_flags


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive rates, got {text!r}")
    return values


def _rates_or_none(text: str) -> tuple[float, ...]:
    return () if text.strip().lower() == "none" else _floats(text)


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def register(subparsers: Any) -> None:
    from e2e.spec import DEFAULT_SCHEMES, SCHEMES, DemoPlan  # light: defaults only

    d = DemoPlan()
    p = subparsers.add_parser(
        "demo",
        help="three-region deployment on this machine: KVCompass vs SGLang's gateway and the "
        "other baselines on real requests",
    )
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="results, plots, logs")
    p.add_argument("--deployment", default=d.deployment, help="built-in name or TOML")
    p.add_argument("--schemes", dest="schemes", type=_names,
                   default=DEFAULT_SCHEMES,
                   help=f"comma-separated, of {', '.join(SCHEMES)}")  # fmt: skip
    p.add_argument("--rates", type=_floats, default=d.mixed_rates, help="Mixed rates, req/s")
    p.add_argument("--origins", type=_names, default=d.origin_mixes,
                   help="origin mixes: workers (demand follows capacity), uniform, "
                   "population")  # fmt: skip
    p.add_argument("--tenants", type=int, default=d.tenants,
                   help="independent tenants of the Mixed workload (the simulator's default is "
                   "50, for 64 workers at 200-6000 req/s)")  # fmt: skip
    p.add_argument("--trace-rates", type=_floats, default=d.trace_rates,
                   help="Mooncake trace rates, req/s (none by default)")  # fmt: skip
    p.add_argument("--trace", type=Path, default=d.trace, help="Mooncake JSONL trace")
    p.add_argument("--burst-rates", type=_rates_or_none, default=d.burst_rates,
                   help="mean rates of the burst run (KVCompass with and without booking), "
                   "req/s; 'none' to skip it")  # fmt: skip
    p.add_argument("--warmup-s", type=float, default=d.warmup_s,
                   help="model seconds of warm-up per run, left out of the metrics")  # fmt: skip
    p.add_argument("--measure-s", type=float, default=d.measure_s,
                   help="model seconds of measured arrivals per run")  # fmt: skip
    p.add_argument("--time-scale", type=float, default=d.time_scale,
                   help="wall seconds per model second")  # fmt: skip
    p.add_argument("--max-output-tokens", type=int, default=d.max_output_tokens)
    p.add_argument("--request-timeout-s", type=float, default=d.request_timeout_s,
                   help="model s a client waits for its response before giving up")  # fmt: skip
    p.add_argument("--stream-interval", type=int, default=16, help="tokens per streamed chunk")
    # RTX 5090 (32 GB) with Llama-3.1-8B BF16: ~12 GB of KV at 128 KiB/token ≈ 96K tokens;
    # HiCache's default host pool is 2x the device pool.
    p.add_argument("--vram-tokens", type=int, default=98_304, help="KV capacity per worker")
    p.add_argument("--dram-tokens", type=int, default=196_608, help="host KV capacity per worker")
    pipeline_flags.add_n_shards(p)
    p.add_argument("--seed", type=int, default=d.seed)
    p.set_defaults(func=run_e2e)


def run_e2e(args: argparse.Namespace) -> int:
    from e2e import report
    from e2e.cluster import ClusterSpec, LocalCluster
    from e2e.demo import run_demo, wall_estimate_s
    from e2e.spec import DemoPlan
    from sim.experiment import ORIGIN_WEIGHTS

    console = report.console()
    bad = [o for o in args.origins if o not in ORIGIN_WEIGHTS]
    if bad:
        console.print(f"error: --origins: expected names from {list(ORIGIN_WEIGHTS)}, got {bad}")
        return 2
    trace = args.trace if args.trace_rates else None
    if trace is not None and not trace.exists():
        console.print(f"[yellow]trace not found: {trace}; skipping the Mooncake runs[/]")
        trace = None
    out: Path = args.out
    try:
        plan = DemoPlan(
            deployment=args.deployment, schemes=args.schemes, mixed_rates=args.rates,
            origin_mixes=args.origins, tenants=args.tenants, trace_rates=args.trace_rates,
            trace=trace, burst_rates=args.burst_rates,
            warmup_s=args.warmup_s, measure_s=args.measure_s, time_scale=args.time_scale,
            max_output_tokens=args.max_output_tokens, seed=args.seed, out_dir=out,
            request_timeout_s=args.request_timeout_s,
        )  # fmt: skip
    except ValueError as exc:
        console.print(f"error: {exc}")
        return 2
    spec = ClusterSpec(deployment=args.deployment, time_scale=args.time_scale,
                       n_shards=pipeline_flags.n_shards(args),
                       stream_interval=args.stream_interval,
                       vram_tokens=args.vram_tokens, dram_tokens=args.dram_tokens)  # fmt: skip
    scaled = (
        f"time scale {args.time_scale:g} (wall s per model s; every latency and rate is in model "
        f"time); outputs capped at {args.max_output_tokens} tokens, streamed "
        f"{args.stream_interval} per chunk; each run: {args.warmup_s:g} s warm-up (not measured) + "
        f"{args.measure_s:g} s measured, from cold caches; Mixed with {args.tenants} tenant(s); a "
        f"client gives up after {args.request_timeout_s:g} s"
    )
    console.rule("KVCompass end-to-end demo")
    console.print(f"What was scaled to fit 2 cores: {scaled}.")
    console.print(
        f"{len(plan.schemes)} schemes × {len(plan.origin_mixes)} origin mixes × "
        f"{len(plan.mixed_rates) + len(plan.trace_rates if trace else ())} rates, then "
        f"{len(plan.burst_rates)} burst run(s) × {len(plan.burst_schemes)} schemes; runs take "
        f"~{wall_estimate_s(plan) / 60:.0f} min after the cluster's start-up"
    )
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    try:
        rows, checks = run_demo(
            plan, lambda: LocalCluster(spec, out / "run", on_status=console.print), console, rows,
            skipped,
        )  # fmt: skip
    except Exception:
        if rows:  # keep what finished
            report.write_json(out / "demo.partial.json", {"error": "see the traceback"}, rows)
            console.print(f"[red]demo failed; {len(rows)} finished runs in "
                          f"{out / 'demo.partial.json'}[/]")  # fmt: skip
        raise
    console.rule(f"{args.deployment}: every scheme on the same requests")
    console.print(scaled)
    for _title, table, verdicts in report.comparison_tables(rows):
        report.print_table(console, table)
        for line in verdicts:
            console.print(f"  {line}")
    for table in report.reuse_tables(rows):
        report.print_table(console, table)
    if skipped:
        for name, why in skipped.items():
            console.print(f"[yellow]not run: {name}: {why}[/]")
    meta = {"deployment": args.deployment, "time_scale": args.time_scale,
            "warmup_s": args.warmup_s, "measure_s": args.measure_s, "tenants": args.tenants,
            "max_output_tokens": args.max_output_tokens,
            "stream_interval": args.stream_interval, "seed": args.seed, "skipped": skipped,
            "checks": checks, "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    report.write_json(out / "demo.json", meta, rows)
    plots = report.plot(rows, out, note=scaled)
    for line in checks["lines"]:
        console.print(line)
    console.print(f"wrote {out / 'demo.json'} and {', '.join(str(p) for p in plots)} "
                  f"in {meta['wall_s']:.0f} s")  # fmt: skip
    for r in rows:
        if r.get("completed", 0) == 0:
            console.print(f"{r['scheme']} at {r['workload']}, origins {r['origins']}, "
                          f"{r['rate']:g} req/s: no request completed (every client gave up "
                          f"after {args.request_timeout_s:g} s)")  # fmt: skip
    # A collapsed baseline is a result; the demo fails when its checks do or KVCompass served
    # nothing.
    ours_failed = any(r.get("completed", 0) == 0 for r in rows if r["scheme"] == "kvcompass")
    bad_checks = not (checks["views"]["ok"] and checks["events"]["ok"])
    return 1 if ours_failed or bad_checks else 0
